"""What one dashboard watches and on what terms: the run's model, the session worker, and the viewer's flags.

The app's parts (tui.dashboard.controls, lifecycle, views, keys) are handed
this object and the few callables they act through (say, redraw, exit, push a
screen), never the app: each part reads the state it decides on here, and a
resume (tui.dashboard.attach_app) swaps ``model`` and ``pump`` in one place for
all of them. Textual-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.run.control.session import Session
from tui.dashboard.pump import SessionPump
from tui.model.dashboard import RunModel


@dataclass
class Watch:
    """The watched run (``model``), its session worker (``pump``) and the viewer's terms."""

    model: RunModel
    pump: SessionPump
    #: A viewer that may look, not steer (``attach --read-only``, or a session that says so).
    read_only: bool = False
    #: The Trainer runs inside this process: quitting stops it, so there is no detach.
    in_process: bool = False
    #: True when quitting may leave the engine running (process mode); set when the session opens.
    detachable: bool = False
    #: The run's directory, once the session (or the launch) names it.
    run_dir: str | None = None
    #: Set by an abort from this viewer: the app exits once the engine has stopped.
    exit_when_ended: bool = False

    @property
    def session(self) -> Session | None:
        """The open session (None before it opened and after it closed)."""
        return self.pump.session

    @property
    def closed(self) -> bool:
        """True once the worker has closed the session."""
        return self.pump.closed.is_set()

    @property
    def controllable(self) -> bool:
        """True when this viewer may steer the run now (connected, not read-only, the run not ended)."""
        return self.session is not None and not self.read_only and not self.model.ended

    def why_not(self, what: str) -> str | None:
        """Why the control ``what`` may not be sent now (one line for the status bar), or None when it may."""
        if self.read_only:
            return f"{what}: read-only viewer — controls are disabled (attached with --read-only)"
        if self.session is None:
            return f"{what}: not connected to the engine yet"
        if self.model.ended:
            return f"{what}: the run has ended — nothing to control (q quits)"
        return None

    def run_name(self) -> str:
        """The run's name for messages ("the run" before RunStarted names it)."""
        started = self.model.started
        return started.name if started and started.name else "the run"

    def engine_pid(self) -> int | None:
        """The engine's pid, from its RunStarted or its launch (None when unknown)."""
        started = self.model.started
        return (started.pid if started is not None and started.pid else None) or self.pump.start_watch.pid

    @property
    def will_detach(self) -> bool:
        """True when q leaves an engine running (process mode, attach, read-only, or one still starting)."""
        if self.model.ended or self.closed:
            return False
        if self.session is None:
            return not self.in_process
        return self.read_only or self.detachable

    @property
    def stoppable(self) -> bool:
        """True when Ctrl-C stops something: the run, or the engine that is starting."""
        if self.read_only or self.model.ended or self.closed:
            return False
        return self.session is not None or not self.in_process

    def ended_code(self) -> int:
        """The exit code of a run that ended (or a session that failed) while this viewer watched."""
        fin = self.model.finished
        return fin.exit_code if fin else (1 if self.model.connection.startswith("failed") else 0)
