"""RunClient: a viewer of an engine in another process, through nothing but its run directory.

- ``history()`` reads events.jsonl with the vectorised reader in
  engine.run.history.store (a torn last line is left for ``poll`` to finish or
  skip); ``history(steps=False)`` leaves the step lines out, for a viewer that
  reads the run's steps from its step record (engine.run.steps), and ``poll``
  then skips them too (a step line is recognised by its first bytes, never decoded).
- ``poll()`` follows the file by offset: it reads what was appended, returns
  the complete lines as events and keeps a partial last line for next time.
  It checks the file every ``POLL_INTERVAL_S`` while waiting (``time.sleep``,
  so no GIL is held); the engine itself flushes step events at least every
  second and acks, checkpoints and state changes at once.
- ``send()`` opens a connection to the control socket per request (a few
  hundred µs on a Unix socket; no connection state to repair after an engine
  restart) and returns the ack event. It talks only to this run's engine:
  the socket must be the run owner's (engine.run.control.wire.connect), and
  the engine's hello must give this run's id (status.json's ``run_id``; its
  pid for a run without one) before the request is sent, one more round
  trip per request: a ``pause`` meant for a finished run never reaches
  another engine through a link or a hard link.
- ``liveness()`` reads status.json and checks the pid (engine.run.rundir.liveness).

Thread-safe: ``poll`` and ``history`` share a lock; ``send`` has its own socket.
Torch-free.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from engine.core.fmt import printable
from engine.core.safe_files import open_regular
from engine.run import events as ev
from engine.run.control import wire
from engine.run.control.requests import Request
from engine.run.control.session import ACK_TYPES, Session, SessionError
from engine.run.history import History, parse_line, read_history
from engine.run.history.store import STEP_PREFIX
from engine.run.rundir import Liveness, RunDir, liveness, probe, resume_command

#: How often poll() looks at the file while waiting (s); bounds the latency a viewer adds.
POLL_INTERVAL_S = 0.02
#: Most bytes one poll() decodes, so a viewer that fell behind catches up in bounded steps.
POLL_MAX_BYTES = 4 << 20
#: The channel's hello line (engine.run.control.wire).
_HELLO = json.dumps({"v": wire.PROTOCOL, "op": "hello"})


class RunClient(Session):
    """Watch (and, unless ``read_only``, steer) the run in ``run_dir``."""

    def __init__(self, run_dir: Path | str | RunDir, read_only: bool = False) -> None:
        self._run_dir = run_dir if isinstance(run_dir, RunDir) else RunDir(Path(run_dir))
        self.read_only = read_only
        self._lock = threading.Lock()
        self._offset = 0
        self._pending = b""
        self._handle = None
        self._inode: tuple[int, int] | None = None
        self._steps = True  # whether poll() returns step events (history(steps=False) turns them off)

    def run_dir(self) -> RunDir:
        """The run directory."""
        return self._run_dir

    # ------------------------------------------------------------------ reading
    def history(self, steps: bool = True, newest: Mapping[str, int] | None = None,
                columns: Mapping[str, Sequence[str]] | None = None) -> History:
        """Every event so far, in order (a list-like History; see engine.run.history.store); without the step
        events when ``steps`` is False (``poll`` then leaves them out too), and only the newest n of each type
        in ``newest`` (``poll`` then returns every new one), those of a type in ``columns`` as its columns."""
        with self._lock:
            self._steps = steps
            try:
                history = read_history(self._run_dir.events, steps=steps, newest=newest, columns=columns)
            except OSError:  # not a regular file (engine.core.safe_files): no log to show, as when it is missing
                history = History(self._run_dir.events)
            self._close_handle()
            self._offset = history.offset
            self._pending = b""
            return history

    def steps_elsewhere(self) -> None:
        """The viewer has the run's step record: ``poll`` skips step lines from now on (never decoded)."""
        with self._lock:
            self._steps = False

    def poll(self, timeout: float = 0.1) -> list[ev.Event]:
        """Events appended since the last call, waiting up to ``timeout`` s for the first."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            with self._lock:
                events = self._read_new()
            if events:
                return events
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            time.sleep(min(POLL_INTERVAL_S, remaining))

    def _read_new(self) -> list[ev.Event]:
        path = self._run_dir.events
        if self._handle is None:
            try:
                self._handle = open_regular(path)  # a FIFO in its place is no log: nothing to show, never a hang
            except OSError:
                return []
            info = os.fstat(self._handle.fileno())
            self._inode = (info.st_dev, info.st_ino)
        try:
            info = os.stat(path)
        except FileNotFoundError:
            return []
        if (info.st_dev, info.st_ino) != self._inode or info.st_size < self._offset:
            # The file was replaced or truncated (a new run in the same directory): start over.
            self._close_handle()
            self._offset, self._pending = 0, b""
            return self._read_new()
        if info.st_size == self._offset:
            return []
        self._handle.seek(self._offset)
        data = self._handle.read(min(POLL_MAX_BYTES, info.st_size - self._offset))
        self._offset += len(data)
        data = self._pending + data
        cut = data.rfind(b"\n")
        if cut < 0:
            self._pending = data
            return []
        self._pending = data[cut + 1:]
        out = []
        for line in data[:cut].split(b"\n"):
            if not self._steps and line.startswith(STEP_PREFIX):
                continue
            event = parse_line(line) if line else None
            if event is not None:
                out.append(event)
        return out

    def _close_handle(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    # ------------------------------------------------------------------ state
    def liveness(self) -> str:
        """live / stalled / finished / aborted / failed / crashed / stale (another host, silent) / unknown."""
        return liveness(self._run_dir)

    def liveness_detail(self) -> Liveness:
        """The run directory's ``probe``: for a stalled engine, since when and its process's state."""
        return probe(self._run_dir)

    def status(self) -> dict | None:
        """The engine's status record (pid, host, heartbeat, state, step, …), or None."""
        return self._run_dir.read_status()

    def resume_command(self) -> str | None:
        """How to continue this run, when it stopped without finishing (crashed, aborted, failed); else None."""
        state = self.liveness()
        if state in ("live", "stalled", "finished", "unknown"):  # a stalled engine still holds the run
            return None
        status = self.status() or {}
        return status.get("resume_command") or resume_command(self._run_dir)

    # ------------------------------------------------------------------ controls
    def hello(self, timeout: float = 2.0) -> dict:
        """Ask the engine who it is (pid, run, run id, state, step) over the channel; SessionError if unreachable."""
        reply = self._call(_HELLO, timeout, "hello")
        if reply.get("type") != "hello":
            raise SessionError(f"engine answered hello with {reply.get('error', reply)!r}")
        return reply

    def send(self, request: Request, timeout: float = 5.0) -> ev.Event:
        """Deliver a control and return its ack (SettingChanged, Refused or Prediction); SessionError otherwise.

        A read-only viewer may send a dry run: it changes nothing, and the engine answers it with a Prediction.
        """
        if self.read_only and not request.dry_run:
            raise SessionError("read-only viewer: controls are disabled (attach without --read-only to steer)")
        reply = self._call(json.dumps(request.to_dict()), timeout, request.action)
        if reply.get("type") == "error":
            raise SessionError(f"engine refused the message: {reply.get('error')}")
        event = ev.from_dict(reply)
        if event is None or event.type not in ACK_TYPES or getattr(event, "request_id", None) != request.id:
            raise SessionError(f"engine sent an unexpected answer to {request.action}: {str(reply)[:200]}")
        return event

    def _call(self, line: str, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        try:
            sock = wire.connect(self._run_dir, timeout=max(0.05, timeout))
        except wire.ChannelError as exc:
            raise SessionError(f"{exc}; {what} not sent") from None
        except OSError:
            raise SessionError(self._unreachable()) from None
        try:
            if what != "hello":
                self._same_run(self._exchange(sock, _HELLO, deadline, timeout, "hello"), what)
            return self._exchange(sock, line, deadline, timeout, what)
        finally:
            sock.close()

    def _same_run(self, hello: dict, what: str) -> None:
        """SessionError unless the engine that said ``hello`` is this run's: the run id status.json records (the
        pid where either side has no id). Without a status record there is nothing to tell it by: the socket's
        owner was checked already."""
        status = self.status() or {}
        mine, theirs = status.get("run_id") or "", hello.get("run_id") or ""
        if mine and theirs:
            same, told = mine == theirs, f"run id {str(theirs)[:64]}, this run's is {mine}"
        elif "pid" in status:
            same, told = hello.get("pid") == status["pid"], f"pid {hello.get('pid')}, this run's is {status['pid']}"
        else:
            return
        if not same:
            raise SessionError(f"{printable(self._run_dir.socket)} answers for another engine ({told}); "
                               f"{what} not sent")

    def _exchange(self, sock, line: str, deadline: float, timeout: float, what: str) -> dict:
        """Send one line on ``sock`` and return its reply, parsed; SessionError when there is none."""
        try:
            sock.sendall(line.encode() + b"\n")
            raw = wire.read_line(sock, deadline)
        except TimeoutError:
            state = self.liveness_detail().describe()
            raise SessionError(f"engine did not answer {what} within {timeout:g} s ({state}); a delivered request "
                               "still applies at the next step boundary and its ack "
                               "appears in the event log") from None
        except (OSError, ValueError) as exc:
            raise SessionError(f"control channel failed during {what}: {exc}") from None
        if raw is None:
            raise SessionError(f"engine closed the channel before answering {what} ({self._unreachable()})")
        try:
            reply = json.loads(raw)
        except ValueError:
            raise SessionError(f"engine sent a malformed answer to {what}") from None
        if not isinstance(reply, dict):
            raise SessionError(f"engine sent a malformed answer to {what}")
        return reply

    def _unreachable(self) -> str:
        state = self.liveness()
        if state == "crashed":
            return f"engine is not running (crashed); resume with: {self.resume_command()}"
        if state in ("finished", "aborted", "failed"):
            return f"engine is not running (run {state})"
        if state == "unknown":
            return f"no engine at {self._run_dir.root} (no status.json)"
        return f"cannot reach the engine's control socket {self._run_dir.socket} (liveness: {state})"

    def close(self) -> None:
        """Stop following the file (the engine keeps running)."""
        with self._lock:
            self._close_handle()
