"""The control channel: a Unix socket in the run directory through which viewers steer the engine.

This is the engine's side, the server (the protocol and the addressing are in
engine.run.control.wire). Only a request that ``Request.from_dict`` accepted
is put in ``Controls``; everything else is answered here and never reaches
the training loop.

Who may talk. The socket is created under a temporary name, made 0600 and
renamed into place, inside a run directory that is 0700, so the file system
already keeps other users out. On top of that every connection's peer
credentials (``SO_PEERCRED``: the uid of the process that called connect(),
filled in by the kernel, not claimed by the client) must equal the engine's
uid — this still holds when someone loosens the directory's permissions or
the socket is reached through an inherited descriptor. Root is not let in
either unless the engine runs as root: a control may pause a colleague's run
just as well as one's own.

Threads. One acceptor thread waits in ``select`` on the listening socket and
a wake-up pipe; each client gets its own thread, at most ``MAX_CLIENTS`` at
once. When every slot is taken, a newcomer evicts the oldest connection of
the client process (peer pid) holding the most slots: what one client holds
shrinks as soon as anyone else wants in, so a same-user script hogging the
channel can never lock the dashboard (one connection per request) out, while
one busy client may still use every slot nobody else needs (fifty concurrent
requests from one viewer are all served). Why threads
and not one selector loop: a client's thread blocks waiting for its ack,
which keeps the code linear; an idle thread blocked in ``recv`` or ``wait``
holds no GIL, so the training thread does not notice it, and each costs a
stack (8 MiB reserved, tens of KiB touched) — 64 of them about 5 MiB of RSS.
Everything the server does on the training thread is the ack matcher the bus
calls per event: one type check and, for an ack, a dict lookup.

Torch-free.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import threading
import time
from pathlib import Path

from engine.run import events as ev
from engine.run.control.requests import Controls, Request, RequestError
from engine.run.control.session import ACK_TYPES
from engine.run.control.wire import (
    LINE_TIMEOUT_S,
    MAX_LINE,
    PROTOCOL,
    UCRED,
    ChannelError,
    error_reply,
    serving,
    socket_address,
)
from engine.run.rundir import RunDir
from engine.run.sinks import EventBus

#: Most connections served at once.
MAX_CLIENTS = 64
#: A request the engine has not answered after this long gets an error reply (the loop is stuck in a step).
ACK_TIMEOUT_S = 60.0



class _Pending:
    """A request waiting for its ack event."""

    __slots__ = ("done", "event")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.event: ev.Event | None = None


class ControlServer:
    """Serves a run's control socket: validated requests into ``controls``, acks back from ``bus``."""

    def __init__(self, run_dir: RunDir, controls: Controls, bus: EventBus, *, max_clients: int = MAX_CLIENTS,
                 line_timeout: float = LINE_TIMEOUT_S, ack_timeout: float = ACK_TIMEOUT_S,
                 max_line: int = MAX_LINE, run_id: str = "") -> None:
        """``run_id``: the run's id (RunConfig.run_id), which ``hello`` answers so a client knows whose engine it
        reached."""
        self.run_dir = run_dir if isinstance(run_dir, RunDir) else RunDir(Path(run_dir))
        self.run_id = run_id
        self.controls = controls
        self.bus = bus
        self.max_clients = max_clients
        self.line_timeout = line_timeout
        self.ack_timeout = ack_timeout
        self.max_line = max_line
        #: Connections turned away (too many, wrong uid, hostile input) — for tests and the log.
        self.rejected = 0
        self._pending: dict[str, _Pending] = {}
        self._lock = threading.Lock()
        self._clients: dict[socket.socket, int] = {}  # connection → peer pid, oldest first
        self._threads: set[threading.Thread] = set()
        self._closing = threading.Event()
        self._listener: socket.socket | None = None
        self._inode: tuple[int, int] | None = None
        self._wake_r = self._wake_w = -1
        self._acceptor: threading.Thread | None = None
        self._state = "starting"
        self._step = 0

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "ControlServer":
        """Bind the socket (0600, owner-only) and start accepting; ChannelError if another engine serves the run."""
        path = self.run_dir.socket
        if serving(self.run_dir):
            raise ChannelError(f"{path}: another engine is serving this run directory")
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            with socket_address(tmp) as address:
                listener.bind(address)
            os.chmod(tmp, 0o600)
            info = os.stat(tmp)
            os.replace(tmp, path)  # atomic; replaces the socket a crashed engine left behind
            listener.listen(self.max_clients)
        except OSError as exc:
            listener.close()
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise ChannelError(f"{path}: cannot create control socket ({exc.strerror or exc})") from None
        self._inode = (info.st_dev, info.st_ino)
        self._listener = listener
        self._wake_r, self._wake_w = os.pipe()
        self.bus.add(self._on_event)
        self._acceptor = threading.Thread(target=self._accept_loop, name="control-accept", daemon=True)
        self._acceptor.start()
        return self

    def viewers(self) -> int:
        """Clients connected now: each is a process on this machine (a Unix socket), e.g. a dashboard."""
        with self._lock:
            return len(self._clients)

    def viewer_pids(self) -> list[int]:
        """The process of each connected client, oldest connection first: what a newcomer finding every slot
        taken reads to evict the oldest connection of the process holding the most."""
        with self._lock:
            return list(self._clients.values())

    def stop(self) -> None:
        """Stop accepting, answer waiting requests with an error, close clients, remove the socket."""
        if self._closing.is_set() or self._listener is None:
            return
        self._closing.set()
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        if self._acceptor is not None:
            self._acceptor.join(timeout=2)
        with self._lock:
            pending = list(self._pending.values())
            self._pending.clear()
            clients = list(self._clients)
            threads = list(self._threads)
        for slot in pending:
            slot.done.set()  # the waiting thread replies "engine stopped before answering"
        for conn in clients:  # ends each recv(); a reply being sent still goes out
            try:
                conn.shutdown(socket.SHUT_RD)
            except OSError:
                pass
        deadline = time.monotonic() + 3.0  # a client that does not read its reply costs at most this
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._listener.close()
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
        self._remove_socket()

    def _remove_socket(self) -> None:
        path = self.run_dir.socket
        try:
            info = os.stat(path)
            if (info.st_dev, info.st_ino) == self._inode:  # never remove a newer engine's socket
                os.unlink(path)
        except OSError:
            pass

    # ------------------------------------------------------------------ bus side (training thread)
    def _on_event(self, event: ev.Event) -> None:
        kind = event.type
        if kind == "step":
            self._step = event.step
        elif kind == "state":
            self._state = event.state
        elif kind in ACK_TYPES:
            rid = getattr(event, "request_id", None)
            if rid is not None:
                with self._lock:
                    slot = self._pending.pop(rid, None)
                if slot is not None:
                    slot.event = event
                    slot.done.set()

    # ------------------------------------------------------------------ accepting
    def _accept_loop(self) -> None:
        assert self._listener is not None
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ)
        selector.register(self._wake_r, selectors.EVENT_READ)
        try:
            while not self._closing.is_set():
                ready = selector.select()
                if self._closing.is_set():
                    break
                if not any(key.fileobj is self._listener for key, _ in ready):
                    continue
                try:
                    conn, _ = self._listener.accept()
                except OSError:
                    continue
                self._admit(conn)
        finally:
            selector.close()

    def _admit(self, conn: socket.socket) -> None:
        try:
            pid = UCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, UCRED.size))[0]
        except OSError:
            pid = 0
        victim = None
        with self._lock:
            if len(self._clients) >= self.max_clients:
                victim = self._victim()
                self._clients.pop(victim, None)
            self._clients[conn] = pid
        if victim is not None:  # its thread's recv() returns now and it ends
            self._reject()
            try:
                victim.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        thread = threading.Thread(target=self._serve, args=(conn,), name="control-client", daemon=True)
        with self._lock:
            self._threads.add(thread)
        thread.start()

    def _victim(self) -> socket.socket:
        """The oldest connection of the client process holding the most (called with the lock held)."""
        counts: dict[int, int] = {}
        for pid in self._clients.values():
            counts[pid] = counts.get(pid, 0) + 1
        greedy = max(counts, key=counts.__getitem__)
        return next(conn for conn, pid in self._clients.items() if pid == greedy)

    def _reject(self) -> None:
        with self._lock:
            self.rejected += 1

    @staticmethod
    def _send_and_close(conn: socket.socket, data: bytes) -> None:
        try:
            conn.settimeout(1.0)
            conn.sendall(data)
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        conn.close()

    # ------------------------------------------------------------------ one client
    def _serve(self, conn: socket.socket) -> None:
        try:
            uid = UCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, UCRED.size))[1]
            if uid != os.getuid():
                self._reject()
                self._send_and_close(conn, error_reply(
                    f"permission denied: uid {uid} may not control this run (owner uid {os.getuid()})"))
                return
            self._conversation(conn)
        except OSError:
            pass  # the client went away mid-reply; nothing to tell anyone
        finally:
            with self._lock:
                self._clients.pop(conn, None)
                self._threads.discard(threading.current_thread())
            try:
                conn.close()
            except OSError:
                pass

    def _conversation(self, conn: socket.socket) -> None:
        buf = bytearray()
        deadline = time.monotonic() + self.line_timeout
        while not self._closing.is_set():
            cut = buf.find(b"\n")
            if cut > self.max_line or (cut < 0 and len(buf) > self.max_line):
                self._reject()
                self._send_and_close(conn, error_reply(f"message over {self.max_line} bytes; requests are small JSON"))
                return
            if cut >= 0:
                line = bytes(buf[:cut])
                del buf[:cut + 1]
                if line.strip():
                    try:
                        reply = self._handle(line)
                    except Exception as exc:  # a bug here must cost one reply, never the channel or the run
                        reply = error_reply(f"internal error: {type(exc).__name__}")
                    conn.settimeout(5.0)
                    conn.sendall(reply)
                deadline = time.monotonic() + self.line_timeout
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._reject()
                self._send_and_close(conn, error_reply(
                    f"no complete request line within {self.line_timeout:g} s; closing"))
                return
            conn.settimeout(remaining)
            try:
                data = conn.recv(65536)
            except socket.timeout:
                continue
            if not data:
                return
            buf += data

    def _handle(self, line: bytes) -> bytes:
        """One request line → one reply line."""
        try:
            data = json.loads(line)
        except (ValueError, UnicodeDecodeError) as exc:
            return error_reply(f"malformed JSON: {str(exc).splitlines()[0][:200]}")
        except RecursionError:  # "[[[[…" nested deeper than the decoder's stack
            return error_reply("malformed JSON: nested too deeply")
        if isinstance(data, dict) and "op" in data:
            return self._op(data)
        rid = data.get("id") if isinstance(data, dict) else None
        try:
            request = Request.from_dict(data)
        except RequestError as exc:
            return error_reply(str(exc)[:300], rid)
        slot = _Pending()
        with self._lock:
            if request.id in self._pending:
                return error_reply(f"request id {request.id!r} is already waiting for its answer", request.id)
            if self._closing.is_set():
                return error_reply("engine is stopping; request not delivered", request.id)
            self._pending[request.id] = slot
        self.controls.submit(request)
        if not slot.done.wait(self.ack_timeout):
            with self._lock:
                self._pending.pop(request.id, None)
            return error_reply(f"engine did not answer within {self.ack_timeout:g} s "
                               f"(state {self._state}, step {self._step}); the request may still apply", request.id)
        if slot.event is None:
            return error_reply("engine stopped before answering", request.id)
        return (ev.to_json(slot.event) + "\n").encode()

    def _op(self, data: dict) -> bytes:
        if data.get("v") != PROTOCOL:
            return error_reply(f"channel protocol {data.get('v')!r} not supported (want {PROTOCOL})")
        op = data.get("op")
        if op == "hello" and set(data) <= {"v", "op"}:
            return (json.dumps({"type": "hello", "protocol": PROTOCOL, "pid": os.getpid(), "run": self.run_dir.name,
                                "run_id": self.run_id, "state": self._state, "step": self._step}) + "\n").encode()
        return error_reply(f"unknown op {op!r}; allowed: hello")
