"""Messages the session worker posts to the UI (``post_message`` only, never ``call_from_thread``)."""

from __future__ import annotations

from textual.message import Message

from engine.run.control.requests import Request
from engine.run.events import Event
from engine.run.rundir import Liveness


class EventBatch(Message):
    """Events gathered over one batching window (~80 ms), or the whole history on connect.

    ``steps``: the run's step record (tui.model.step_source.RecordSteps), opened by the worker and handed to
    the UI thread, which alone reads it from then on: with the history (whose step lines were then left out),
    or on its own once it can be read (the engine's first rows, an old run's first converted chunk).
    """

    def __init__(self, events: list[Event], history: bool = False, steps=None) -> None:
        super().__init__()
        self.events = events
        self.history = history
        self.steps = steps


class StepsProgress(Message):
    """An old run's log is being converted into its record: ``done`` of ``total`` bytes (``finished``: it is)."""

    def __init__(self, done: int, total: int, finished: bool = False) -> None:
        super().__init__()
        self.done, self.total, self.finished = done, total, finished


class SessionReady(Message):
    """The session factory returned: whether controls are allowed, whether detaching is possible, the run dir."""

    def __init__(self, read_only: bool, detachable: bool, run_dir: str | None) -> None:
        super().__init__()
        self.read_only = read_only
        self.detachable = detachable
        self.run_dir = run_dir


class SessionFailed(Message):
    """The session could not be opened (``fatal``) or one read failed and is being retried; one line for the user."""

    def __init__(self, error: str, fatal: bool = True) -> None:
        super().__init__()
        self.error = error
        self.fatal = fatal


class EngineSpawned(Message):
    """The engine the session factory is launching exists (its pid, its run directory); its start-up phases follow
    as events."""

    def __init__(self, pid: int, run_dir: str) -> None:
        super().__init__()
        self.pid = pid
        self.run_dir = run_dir


class StartCancelled(Message):
    """The engine being launched was stopped, as asked (Ctrl-C while connecting): ``line`` says where it was."""

    def __init__(self, line: str, exit_code: int) -> None:
        super().__init__()
        self.line = line
        self.exit_code = exit_code


class LivenessChanged(Message):
    """``Session.liveness()`` changed (live / stalled / finished / aborted / failed / crashed / unknown); ``detail``
    is ``Session.liveness_detail()`` (a stalled engine's silence and process state), when the session gave it."""

    def __init__(self, liveness: str, detail: Liveness | None = None) -> None:
        super().__init__()
        self.liveness = liveness
        self.detail = detail


class ControlDone(Message):
    """A control request came back: ``ack`` is the engine's SettingChanged/Refused, or ``error`` says why not."""

    def __init__(self, request: Request, ack: Event | None, error: str | None = None) -> None:
        super().__init__()
        self.request = request
        self.ack = ack
        self.error = error


class CompareLoaded(Message):
    """Another run's history was read for the compare overlay: ``model`` (a RunModel), or ``error`` says why not."""

    def __init__(self, path: str, model, error: str | None = None) -> None:
        super().__init__()
        self.path = path
        self.model = model
        self.error = error
