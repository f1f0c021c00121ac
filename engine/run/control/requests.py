"""Control requests a viewer sends to the engine, and the thread-safe mailbox the loop drains.

A request is small and versioned (``Request.to_dict`` is what travels over the
control socket). The engine applies requests only at a step boundary and
answers every one with an event that carries its ``request_id``
(``SettingChanged`` when applied, ``Refused`` with the reason otherwise), so a
viewer never guesses what happened.

Torch-free: the dashboard and the socket server import this.
"""

from __future__ import annotations

import itertools
import math
import os
import queue
import re
import threading
from dataclasses import dataclass, field
from typing import Any

#: Version of the request format; the socket server rejects other versions.
REQUEST_VERSION = 1

#: Every action a viewer may ask for.
ACTIONS = ("pause", "resume", "checkpoint_now", "abort", "set", "free_memory", "autotune")

#: A setting's name: lower-case words (an engine setting's or a task's declared one), at most 64 characters.
_SETTING_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
#: Longest string a setting's value may be on the wire (a choice's name).
MAX_VALUE_CHARS = 64

#: Abort modes: graceful checkpoints first, now stops without one.
ABORT_MODES = ("graceful", "now")

#: Autotune modes: start a search, or cancel the one running (its settings go back to those before it).
AUTOTUNE_MODES = ("start", "cancel")

_ids = itertools.count(1)


def new_request_id() -> str:
    """A request id unique within this process (pid-prefixed, so two viewers never collide)."""
    return f"{os.getpid()}-{next(_ids)}"


class RequestError(ValueError):
    """A request that is not one of the Controls (unknown action, bad setting or value)."""


class BuildInterrupted(Exception):
    """A stop came while the training thread waited for a step's first batch: the step is given up (raised in that
    thread by the engine's signal handler, ``Controls.interrupt_build``; the loop then stops at the step before)."""


@dataclass(frozen=True)
class Request:
    """One control request: ``action`` plus, for ``set``, ``name``/``value``; ``force`` skips the budget check;
    ``dry_run`` asks only for the prediction the change would be judged by (answered with a Prediction);
    ``together``: other settings changed with this one, judged as one change and applied together (a batch
    size that fits only with the leaner kernel asked for beside it)."""

    action: str
    name: str | None = None
    value: Any = None
    mode: str | None = None
    force: bool = False
    dry_run: bool = False
    id: str = field(default_factory=new_request_id)
    together: tuple[tuple[str, Any], ...] = ()

    @property
    def changes(self) -> dict[str, Any]:
        """Every setting a ``set`` changes: its own, then those asked for with it."""
        return {self.name: self.value, **dict(self.together)} if self.action == "set" else {}

    def to_dict(self) -> dict[str, Any]:
        """The versioned JSON form that travels over the control socket."""
        out = {"v": REQUEST_VERSION, "id": self.id, "action": self.action}
        if self.name is not None:
            out["name"] = self.name
        if self.value is not None:
            out["value"] = self.value
        if self.mode is not None:
            out["mode"] = self.mode
        if self.force:
            out["force"] = True
        if self.dry_run:
            out["dry_run"] = True
        if self.together:
            out["together"] = dict(self.together)
        return out

    @classmethod
    def from_dict(cls, data: Any) -> "Request":
        """Validate an untrusted request; raises RequestError naming what is wrong."""
        if not isinstance(data, dict):
            raise RequestError("request must be a JSON object")
        if data.get("v") != REQUEST_VERSION:
            raise RequestError(f"request version {data.get('v')!r} not supported (want {REQUEST_VERSION})")
        unknown = set(data) - {"v", "id", "action", "name", "value", "mode", "force", "dry_run", "together"}
        if unknown:
            raise RequestError(f"unknown request field(s): {', '.join(sorted(unknown))}")
        action = data.get("action")
        if action not in ACTIONS:
            raise RequestError(f"unknown action {action!r}; allowed: {', '.join(ACTIONS)}")
        rid = data.get("id")
        if not isinstance(rid, str) or not (0 < len(rid) <= 64):
            raise RequestError("request id must be a string of 1-64 characters")
        force, dry_run = data.get("force", False), data.get("dry_run", False)
        if not isinstance(force, bool) or not isinstance(dry_run, bool):
            raise RequestError("force and dry_run must be true or false")
        if dry_run and action != "set":
            raise RequestError(f"action {action!r} has no dry run (only set)")
        name, value, mode = data.get("name"), data.get("value"), data.get("mode")
        if action == "set":
            value = wire_value(name, value)
        elif name is not None or value is not None:
            raise RequestError(f"action {action!r} takes no name or value")
        modes = {"abort": ABORT_MODES, "autotune": AUTOTUNE_MODES}.get(action)
        if modes is not None:
            mode = mode or modes[0]
            if mode not in modes:
                raise RequestError(f"{action} mode {mode!r}; allowed: {', '.join(modes)}")
        elif mode is not None:
            raise RequestError(f"action {action!r} takes no mode")
        return cls(action=action, name=name, value=value, mode=mode, force=force, dry_run=dry_run, id=rid,
                   together=_together(action, name, data.get("together")))


#: Most settings one request may change together.
MAX_TOGETHER = 8


def _together(action: str, name: Any, together: Any) -> tuple[tuple[str, Any], ...]:
    """A request's ``together`` map checked: only with ``set``, at most MAX_TOGETHER names, each a setting's name
    with a value the wire carries (``wire_value``), none the request's own."""
    if together is None:
        return ()
    if action != "set":
        raise RequestError(f"action {action!r} takes no together")
    if not isinstance(together, dict) or len(together) > MAX_TOGETHER:
        raise RequestError(f"together must be a JSON object of at most {MAX_TOGETHER} settings")
    if name in together:
        raise RequestError(f"together repeats {name!r}, the request's own setting")
    return tuple((key, wire_value(key, value)) for key, value in together.items())


def wire_value(name: Any, value: Any) -> Any:
    """A ``set``'s name and value as the wire carries them, or RequestError: a setting's name (lower-case words),
    and a JSON scalar: true/false, a finite number, a string of at most MAX_VALUE_CHARS characters.

    Only the request's form: whether the run has the setting and the value is
    allowed is the engine's to say, once, with the run's own table
    (engine.core.live_table, at the control handler's door), so a Request made
    in this process is judged exactly as one read from the socket.
    """
    if not isinstance(name, str) or not _SETTING_NAME.fullmatch(name):
        raise RequestError(f"cannot set {str(name)[:64]!r}: a setting's name is lower-case letters, digits and _ "
                           "(the engine's own or one the task declares)")
    if not isinstance(value, (bool, int, float, str)) or (isinstance(value, str) and len(value) > MAX_VALUE_CHARS):
        raise RequestError(f"{name} must be a boolean, a number or a string of at most {MAX_VALUE_CHARS} "
                           f"characters, got {str(value)[:64]!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise RequestError(f"{name} must be finite, got {value!r}")
    return value


# Convenience constructors used by viewers and tests.
def pause() -> Request:
    """Ask the engine to pause after the step in flight."""
    return Request("pause")


def resume() -> Request:
    """Ask a paused engine to continue."""
    return Request("resume")


def checkpoint_now() -> Request:
    """Ask for a checkpoint at the next step boundary."""
    return Request("checkpoint_now")


def abort(mode: str = "graceful") -> Request:
    """Ask the engine to stop: graceful checkpoints first, now does not."""
    return Request("abort", mode=mode)


def autotune(mode: str = "start") -> Request:
    """Ask the engine to search for the fastest settings that fit (``start``), or to stop and restore (``cancel``)."""
    return Request("autotune", mode=mode)


def set_value(name: str, value: Any, force: bool = False, dry_run: bool = False,
              together: dict[str, Any] | None = None) -> Request:
    """Ask the engine to change a setting (the engine's or one the task declares: engine.core.live_table);
    ``dry_run``: only predict it; ``together``: other settings to judge and apply with it, as one change."""
    together = _together("set", name, together) if together else ()
    value = wire_value(name, value)
    return Request("set", name=name, value=value, force=force, dry_run=dry_run, together=together)


class Controls:
    """Thread-safe mailbox between viewers and the training loop.

    Any thread may ``submit``; the loop calls ``drain`` at each step boundary and
    ``wait_while_paused`` blocks without holding the GIL. ``stop_event`` is set
    for an immediate abort so a long evaluation can notice it between batches.
    """

    def __init__(self) -> None:
        self._queue: "queue.SimpleQueue[Request]" = queue.SimpleQueue()
        self._wake = threading.Event()
        #: Set by an abort-now (or second SIGINT): loops check it between batches.
        self.stop_event = threading.Event()
        #: Set by a graceful abort / SIGTERM: checkpoint at the next boundary, then stop.
        self.graceful_event = threading.Event()
        #: Why the run is stopping and with which exit code (a user's graceful abort is 0, a signal 130).
        self.stop_reason = ""
        self.graceful_reason = ""
        self.graceful_exit_code = 0
        #: True while the training thread waits for the first batch of a step (engine.training.loop sets it):
        #: nothing of the step has run yet, so a stop may give it up there (``interrupt_build``).
        self.building = False

    def request_graceful(self, reason: str, exit_code: int) -> None:
        """Checkpoint at the next step boundary (or inside an eval), then stop with ``exit_code``."""
        if not self.graceful_event.is_set():
            self.graceful_reason, self.graceful_exit_code = reason, exit_code
        self.graceful_event.set()
        self._wake.set()

    def request_stop(self, reason: str) -> None:
        """Stop at the next boundary without a checkpoint."""
        self.stop_reason = reason
        self.stop_event.set()
        self._wake.set()

    def interrupt_build(self) -> None:
        """Raise BuildInterrupted when the training thread is waiting for a step's first batch. Called by a signal
        handler, which runs in that thread: a batch of a forced huge size took over 10 s to build, and the stop
        waited for a step boundary the build never reached."""
        if self.building:
            self.building = False
            raise BuildInterrupted

    def stopping(self) -> bool:
        """True once any stop was asked for, graceful or immediate."""
        return self.stop_event.is_set() or self.graceful_event.is_set()

    def waiting(self) -> bool:
        """True when a request (or a stop) arrived since the last drain: the next boundary has work."""
        return self._wake.is_set()

    def submit(self, request: Request) -> str:
        """Queue a request for the next step boundary; returns its id."""
        if request.action == "abort":
            if request.mode == "now":
                self.request_stop("aborted now by request; no checkpoint written")
            else:
                self.request_graceful("aborted by request", 0)
        self._queue.put(request)
        self._wake.set()
        return request.id

    def drain(self) -> list[Request]:
        """All requests queued since the last call, in order (called by the loop every step)."""
        if not self._wake.is_set():  # the common case, one attribute read: no queue lock, no Empty exception
            return []
        self._wake.clear()  # before draining: a request put meanwhile sets it again and is read next time
        out = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return out

    def wait(self, timeout: float) -> bool:
        """Block until a request arrives or ``timeout`` passes; True if one arrived."""
        return self._wake.wait(timeout)
