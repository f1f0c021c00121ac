"""``--in-process``: the Trainer in a thread of the viewer's process, behind the same Session interface.

Used for debugging, notebooks, and as the benchmark's comparison: it costs
training speed to the GIL while the UI renders (research/textual-in-process.md),
which is why the engine runs in its own process by default. The run directory
is written exactly as by the engine process (events, status, checkpoints,
control socket), so `attach` works on an in-process run too. A hang-up of the
viewer ends this process, so the viewer should checkpoint and stop (``stop()``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

from engine.run import events as ev
from engine.run.control.requests import Controls, Request
from engine.run.control.session import ACK_TYPES, Session, SessionError
from engine.run.sinks import MemorySink


class InProcessSession(Session):
    """Runs ``engine.app.main.run_prepared`` in a daemon thread; events arrive through memory, not the log."""

    #: The trainer lives in this process: quitting the viewer ends it, so there is nothing to detach from.
    detachable = False

    def __init__(self, prepared) -> None:
        self.prepared = prepared
        self.controls = Controls()
        self._sink = MemorySink()
        self._acks: dict[str, threading.Event] = {}
        self._ack_events: dict[str, ev.Event] = {}
        self._lock = threading.Lock()
        self._history: list[ev.Event] = []
        self.exit_code: int | None = None
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, name="trainer", daemon=True)
        self._thread.start()

    def _on_event(self, event: ev.Event) -> None:
        self._sink(event)
        request_id = getattr(event, "request_id", None)
        if event.type in ACK_TYPES and request_id:
            with self._lock:
                self._ack_events[request_id] = event
                waiter = self._acks.get(request_id)
            if waiter:
                waiter.set()

    def _run(self) -> None:
        from engine.app.main import run_prepared
        from engine.app.prepare import UsageError

        try:
            self.exit_code = run_prepared(self.prepared, console=False, install_signals=False, serve_controls=True,
                                          controls=self.controls, extra_sinks=[self._on_event],
                                          ui_shares_machine=True)
        except UsageError as exc:
            self.error = str(exc)
            self.exit_code = 2
            self._sink(ev.RunFinished(status="failed", reason=str(exc), exit_code=2))
        except Exception as exc:  # the engine already logged it; the viewer must still hear the end
            self.error = f"{type(exc).__name__}: {exc}"
            self.exit_code = 1
            self._sink(ev.RunFinished(status="failed", reason=self.error, exit_code=1))

    def history(self, steps: bool = True, newest: Mapping[str, int] | None = None,
                columns: Mapping[str, Sequence[str]] | None = None) -> list[ev.Event]:
        return []

    def poll(self, timeout: float = 0.1) -> list[ev.Event]:
        return self._sink.drain(timeout)

    def send(self, request: Request, timeout: float = 5.0) -> ev.Event:
        if not self._thread.is_alive():
            raise SessionError("the in-process trainer has stopped")
        waiter = threading.Event()
        with self._lock:
            self._acks[request.id] = waiter
        self.controls.submit(request)
        if not waiter.wait(timeout):
            raise SessionError(f"no acknowledgement for {request.action} within {timeout:.0f} s")
        with self._lock:
            self._acks.pop(request.id, None)
            return self._ack_events.pop(request.id)

    def liveness(self) -> str:
        if self._thread.is_alive():
            return "live"
        if self.exit_code == 2:
            return "failed"
        from engine.run.rundir import liveness

        return liveness(self.prepared.run_dir)

    def run_dir(self):
        return self.prepared.run_dir

    def stop(self, timeout: float = 30.0, reason: str | None = None) -> None:
        """Checkpoint and stop the trainer (a hang-up in in-process mode), waiting up to ``timeout`` s.

        ``reason`` is what the run's log (StateChanged / RunFinished) says; the first one asked for wins.
        """
        self.controls.request_graceful(reason or "viewer closed: checkpointed and stopped (in-process mode)", 130)
        self._thread.join(timeout)

    def wait(self, timeout: float | None = None) -> int | None:
        """Join the trainer thread; its exit code (None if still running)."""
        self._thread.join(timeout)
        return self.exit_code

    def close(self) -> None:
        """The in-process trainer dies with this process: closing means stopping it gracefully."""
        if self._thread.is_alive():
            self.stop()
