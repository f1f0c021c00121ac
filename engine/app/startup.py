"""Start-up phases told as they begin, before the run directory's event log exists; Ctrl-C while starting.

An engine spends its first seconds importing torch, predicting memory and
building data and model, and only then owns its run directory (the guard and
the build come first so bad input leaves no litter). A viewer must not wait
for that to learn what is happening, so each phase goes out the moment it
begins, three ways:

- to the live sinks: the in-process dashboard's memory sink;
- to the console: a headless run prints ``phase importing torch …`` at once;
- to the start-up file the launcher named in ``STARTUP_ENV`` (the dashboard's
  launch): one JSON line per phase, read by the waiting launcher.

Once the event log exists, ``hand_over`` writes the held phases into it with
their original times (an ``attach`` later still sees what the start went
into) and removes the start-up file, whose job is done.

A launched engine tells its first phase ("reading the config") from
``engine/__main__.py`` before the imports and the validation that take most
of its first second (``begin_process``), so the dashboard shows a phase with
a running clock almost as soon as the process exists. A headless run prints
it once its flags are parsed (``tell_headless``: ``--help`` and a bad flag
print no phase), and both go into the run's log with the phases after them.

Stopping while starting. Until the engine owns its run directory it has
written nothing, so SIGINT or SIGTERM (a Ctrl-C, or the dashboard stopping
the engine it launched) ends the process at once with one line and exit 130:
nothing to save, nothing to clean. A KeyboardInterrupt would not do: raised
inside ``import torch`` it is swallowed by an import that catches broadly,
and the engine went on to train (or crashed on a half-imported numpy). From
the lock on, the signal raises KeyboardInterrupt in the engine's own code,
which ``EngineRun`` turns into the same ending with the directory closed
properly; ``engine.app.signals`` takes over once the run serves. An
in-process dashboard cannot signal its own process: its stop lands at the
next phase boundary (``StartupStopped``). A second signal while the first one's
ending is under way changes nothing (its KeyboardInterrupt would cut that
ending short with a traceback). A hang-up with ``on_hangup = "stop"``
(engine.app.signals) ends the start-up the same way, its line saying so.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Callable, Iterable

from engine.core.exit_codes import ExitCode
from engine.core.safe_files import open_for_write
from engine.run import events as ev
from engine.run.rundir import STARTUP_ENV

#: Phases this process told before its StartupPhases existed (``begin_process``), oldest first.
_told: list[ev.PhaseStarted] = []


def begin_process(phase: str = "reading the config") -> None:
    """A launched engine's first phase, told at once to the launcher's start-up file (only there: ``--help`` or a
    bad flag must not print a phase line), and a signal from now on ends the process with one line."""
    named = os.environ.get(STARTUP_ENV)
    if not named:
        return
    event = ev.PhaseStarted(phase=phase)
    _told.append(event)
    _append_line(Path(named), event)

    def stop_now(signum, frame) -> None:
        sys.stderr.write(f"sensorlm-tui: {signal.Signals(signum).name}: stopped while {phase}: nothing was trained\n")
        sys.stderr.flush()
        os._exit(ExitCode.INTERRUPTED)

    _on_stop_signals(stop_now)


def tell_headless(phase: str = "reading the config") -> None:
    """A headless run's first phase, printed at once as the console prints every phase, and held for the run's
    log (``StartupPhases`` takes it)."""
    from engine.run.sinks import ConsoleSink

    event = ev.PhaseStarted(phase=phase)
    _told.append(event)
    ConsoleSink(sys.stdout)(event)


def _on_stop_signals(handler) -> None:
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, handler)


def _append_line(path: Path, event: ev.PhaseStarted) -> bool:
    """One phase as a JSON line at the end of ``path``; False when it cannot be written."""
    try:
        fd = open_for_write(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # never through a link
        with os.fdopen(fd, "a", encoding="utf-8") as handle:
            handle.write(ev.to_json(event) + "\n")
        return True
    except OSError:
        return False


class StartupStopped(Exception):
    """A stop was asked for while the engine was starting (raised at the next phase boundary)."""


class StartupPhases:
    """The phases of one engine's start-up: reported live, held, then handed to the run's event log."""

    def __init__(self, live: Iterable[Callable[[ev.Event], None]] = (), console=None,
                 file: Path | None = None, stopping: Callable[[], bool] = lambda: False) -> None:
        """``live``: sinks that get each phase at once; ``console``: a ConsoleSink for headless lines;
        ``file``: the launcher's start-up file; ``stopping()``: True once a stop was asked for."""
        self.live = list(live)
        self.console = console
        self.file = file
        self.stopping = stopping
        #: Every phase so far, oldest first (what ``hand_over`` writes into the event log): those this process
        #: told before (``begin_process``, ``tell_headless``) are taken, so a second run in the process starts afresh.
        self.held: list[ev.PhaseStarted] = list(_told)
        _told.clear()
        if console is not None and self.held:
            console.count_from(self.held[0].t)  # the console's elapsed counts from the first phase told
        self._owns_dir = self._stopping = False
        #: What stopped the start-up, when a signal did ("SIGHUP …"; "" for a Ctrl-C or a viewer's stop).
        self.cause = ""

    @classmethod
    def from_environment(cls, live=(), console=None, stopping=lambda: False) -> "StartupPhases":
        """Phases for this process: the start-up file is the one a launcher named in ``STARTUP_ENV``."""
        named = os.environ.get(STARTUP_ENV)
        return cls(live, console, Path(named) if named else None, stopping)

    @property
    def current(self) -> str:
        """The phase under way ("" before the first)."""
        return self.held[-1].phase if self.held else ""

    def begin(self, phase: str, detail: str = "") -> None:
        """Phase ``phase`` begins now: tell everyone; StartupStopped first when a stop was asked for."""
        if self.stopping():
            raise StartupStopped(self.current)
        event = ev.PhaseStarted(phase=phase, detail=detail)
        self.held.append(event)
        for sink in self.live:
            sink(event)
        if self.console is not None:
            self.console(event)
        if self.file is not None and not _append_line(self.file, event):
            self.file = None  # the directory went away or is full: viewers will read the phases from the log

    # -- signals ------------------------------------------------------------------------
    def catch_signals(self) -> None:
        """SIGINT / SIGTERM end the start-up (main thread only; the module docstring says how)."""
        _on_stop_signals(self._on_signal)

    def owning_dir(self) -> None:
        """The engine is taking its run directory: a signal from now on raises KeyboardInterrupt, so the
        directory is closed properly (EngineRun.stopped_starting)."""
        self._owns_dir = True

    def _on_signal(self, signum, frame) -> None:
        self.stop_now()

    def stop_now(self, cause: str = "") -> None:
        """End the start-up here (from a signal handler: a Ctrl-C, a SIGTERM, a hang-up with ``on_hangup = stop``):
        before the run directory is the engine's, one line and exit 130 at once; after, KeyboardInterrupt, once."""
        if self._stopping:
            return  # the first stop's ending is under way
        self._stopping, self.cause = True, cause
        if self._owns_dir:
            raise KeyboardInterrupt
        self.tell(self.stopped(), with_console=True)
        self.retire_file()
        os._exit(ExitCode.INTERRUPTED)

    def stopped(self, resume_command: str | None = None) -> ev.RunFinished:
        """The ending of a start-up that was stopped."""
        cause = f"{self.cause}: " if self.cause else ""
        return ev.RunFinished(status="interrupted", steps=0, exit_code=int(ExitCode.INTERRUPTED),
                              reason=f"{cause}stopped while {self.current or 'starting'}: nothing was trained",
                              resume_command=resume_command)

    def tell(self, event: ev.Event, with_console: bool) -> None:
        """``event`` to the live sinks (and the console): a viewer that has no event log to read yet."""
        for sink in [*self.live, *([self.console] if with_console and self.console is not None else [])]:
            sink(event)

    # -- the event log takes over ---------------------------------------------------------
    def hand_over(self, sinks: Iterable[Callable[[ev.Event], None]]) -> None:
        """Write the held phases into the run's own sinks (its event log) and retire the start-up file."""
        sinks = list(sinks)
        for event in self.held:
            for sink in sinks:
                sink(event)
        self.retire_file()

    def retire_file(self) -> None:
        """Remove the start-up file (its readers have the phases, or the log has them)."""
        if self.file is not None:
            try:
                self.file.unlink()
            except OSError:
                pass
            self.file = None
