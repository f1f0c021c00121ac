"""The one interface every viewer uses to watch and steer a run, whatever runs the engine.

Implementations:
- ``engine.run.control.client.RunClient``: an engine in another process, through its run
  directory (events.jsonl + status.json) and control socket.
- ``engine.app.inprocess.InProcessSession``: the Trainer in a thread of this
  process (``--in-process``), through an in-memory sink and ``Controls``.
- test doubles that replay scripted events (no torch).

The dashboard's worker thread owns one Session: it calls ``history()`` once,
then ``poll()`` in a loop (which blocks without holding the GIL), and
``send()`` from the UI's actions. Torch-free.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

from engine.run.control.requests import Request
from engine.run.events import Event
from engine.run.rundir import Liveness

#: Event types that acknowledge a request (they carry its request_id): an autotune's start is acknowledged by
#: its AutotuneStarted, a cancel by the AutotuneChose that restores the settings.
ACK_TYPES = ("setting", "refused", "prediction", "autotune_started", "autotune_chose")


class SessionError(Exception):
    """The session cannot do what was asked (engine gone, channel refused); one-line message."""


class Session(ABC):
    """A viewer's handle on one run. Thread-safe: poll() in a worker, send() from anywhere."""

    #: True when this viewer may not send controls (attach --read-only); send() then raises SessionError.
    read_only: bool = False

    @abstractmethod
    def history(self, steps: bool = True, newest: Mapping[str, int] | None = None,
                columns: Mapping[str, Sequence[str]] | None = None) -> list[Event]:
        """Every event so far (from the log, for a run started elsewhere); call once, before poll().

        ``steps=False``: a viewer that reads the run's steps from its step record (engine.run.steps) asks for
        the other events only; a session may still return step events (the viewer then ignores them).
        ``newest`` (event type → n): the viewer keeps only the newest n events of those types (samples taken
        on a clock), so a session need not return the older ones; of a type in ``columns`` (type → field names)
        it may instead return a History whose ``sample_columns`` hold those fields of the newest n, with the
        newest one an event (engine.run.history.read_history)."""

    @abstractmethod
    def poll(self, timeout: float = 0.1) -> list[Event]:
        """New events since the last call, waiting up to ``timeout`` s for the first (may return [])."""

    @abstractmethod
    def send(self, request: Request, timeout: float = 5.0) -> Event:
        """Deliver a control and return the engine's ack (SettingChanged or Refused with its request_id).

        Raises SessionError when the engine cannot be reached or does not answer in time.
        """

    @abstractmethod
    def liveness(self) -> str:
        """live / stalled / finished / aborted / failed / crashed / unknown."""

    def liveness_detail(self) -> Liveness:
        """``liveness()`` with, for a stalled engine, since when it is silent and its process's state
        (engine.run.rundir.Liveness); a session that cannot tell more gives the word alone."""
        return Liveness(self.liveness())

    def run_dir(self):
        """The run directory (engine.run.rundir.RunDir) when there is one, else None."""
        return None

    def steps_elsewhere(self) -> None:
        """The viewer reads the run's steps from its step record from now on: ``poll`` may leave step events out
        (a session that cannot tell them apart cheaply keeps sending them; the viewer ignores them)."""
        return None

    @property
    def detachable(self) -> bool:
        """True when quitting may leave the engine running: its own process, with a run directory to attach to."""
        try:
            return self.run_dir() is not None
        except Exception:  # a broken run_dir() just means "cannot detach"
            return False

    def stop(self, timeout: float = 30.0, reason: str | None = None) -> None:
        """Checkpoint and stop the run this session owns, waiting up to ``timeout`` s. A session that only
        watches an engine in another process owns nothing: the engine outlives it, so this does nothing."""
        return None

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code of an engine this session owns once it has ended (None: still running, or not owned)."""
        return None

    def close(self) -> None:
        """Stop watching (the engine keeps running unless this session owns it in-process)."""
        return None
