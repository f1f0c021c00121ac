"""The control channel's wire: its protocol, the socket's address however long the path, a client's line.

Protocol (version 1). Newline-delimited JSON, one small object a line, at most
``MAX_LINE`` bytes. A client sends either a control request (the versioned
``Request.to_dict`` form) or a channel query ``{"v": 1, "op": "hello"}``. Each
line gets exactly one reply line:

- a request → the engine's acknowledgement event as ``events.to_json`` writes
  it (``SettingChanged`` or ``Refused``, ``request_id`` = the request's id),
  sent when the training loop applies it at its next step boundary;
- hello → ``{"type": "hello", "protocol": 1, "pid", "run", "state", "step"}``;
- anything wrong → ``{"type": "error", "error": "<one line>", "request_id"}``.

Malformed JSON, an unknown action or op, a wrong version, a line over
``MAX_LINE`` bytes or no complete line within ``LINE_TIMEOUT_S`` get an error
reply; the last two also close the connection (the stream cannot be trusted
to resynchronise). None of it reaches the training loop: only a request that
``Request.from_dict`` accepted is put in ``Controls``.

Long paths. ``sun_path`` holds 107 bytes on Linux, and run directories nest
deeper than that. Instead of a second name to keep in sync (a symlink in
/tmp, an abstract-namespace name in status.json) or a process-wide ``chdir``
(racy with every other thread that opens files), a too-long path is reached
through ``/proc/self/fd/<dirfd>/control.sock``: open the run directory,
bind or connect through the descriptor's magic link, close it. Both ends do
the same, so a client needs nothing but the run directory's path
(``connect``). Cost: one ``open``/``close`` per connection; Linux only, like
``SO_PEERCRED``.

Whose socket. ``connect`` talks only to the run's own engine: the socket file
must be a socket (never a link: a link to another engine's socket sent a
``pause`` meant for a finished run to that engine) owned by the run
directory's owner, and the process listening on it (``SO_PEERCRED``, filled
in by the kernel) must run as that uid: another user who replaced the socket
can no longer answer "paused" in the engine's name. The client then checks
the run id the engine's hello gives (engine.run.control.client).

Torch-free.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import struct
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from engine.core.fmt import printable
from engine.run.rundir import RunDir

#: Version of the channel's own messages (hello, error); requests carry engine.run.control.requests.REQUEST_VERSION.
PROTOCOL = 1
#: Longest request line accepted (bytes, without the newline).
MAX_LINE = 64 * 1024
#: A client must complete each line within this many seconds of connecting or of its last reply.
LINE_TIMEOUT_S = 5.0
#: Longest path bind()/connect() take on Linux (sun_path is 108 bytes with the NUL).
SUN_PATH_MAX = 107
#: struct ucred: pid_t pid, uid_t uid, gid_t gid (SO_PEERCRED).
UCRED = struct.Struct("3i")


class ChannelError(Exception):
    """The control channel cannot be opened (another engine serves this run, no such directory); one line."""


@contextmanager
def socket_address(path: Path) -> Iterator[str]:
    """An address bind()/connect() accept for ``path``, however long (see the module docstring)."""
    text = os.fspath(path)
    if len(os.fsencode(text)) <= SUN_PATH_MAX:
        yield text
        return
    try:
        fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    except OSError as exc:
        raise ChannelError(f"{path.parent}: cannot open run directory ({exc.strerror})") from None
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def connect(run_dir: RunDir | Path, timeout: float = 5.0) -> socket.socket:
    """A connected client socket to a run's control channel: OSError when nobody listens, ChannelError when what
    is there is not the run's own engine (the module docstring says what is checked)."""
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(Path(run_dir))
    owner = os.stat(rd.root).st_uid
    _check_socket_file(rd.socket, owner)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        with socket_address(rd.socket) as address:
            sock.connect(address)
        uid = UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, UCRED.size))[1]
        if uid != owner:
            raise ChannelError(f"{printable(rd.socket)}: the process listening runs as uid {uid}, not as the run "
                               f"directory's owner (uid {owner}); not this run's engine")
    except BaseException:
        sock.close()
        raise
    return sock


def _check_socket_file(path: Path, owner: int) -> None:
    """ChannelError unless ``path`` is a socket (not a link) owned by ``owner``; OSError when it is missing."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise ChannelError(f"{printable(path)}: a symbolic link, not the engine's socket (it makes its own); "
                           "not followed")
    if not stat.S_ISSOCK(info.st_mode):
        raise ChannelError(f"{printable(path)}: not a socket")
    if info.st_uid != owner:
        raise ChannelError(f"{printable(path)}: owned by uid {info.st_uid}, not by the run directory's owner "
                           f"(uid {owner}); not this run's engine")


def serving(run_dir: RunDir | Path) -> bool:
    """True when an engine is listening on the run's control socket (a crashed one leaves only the file).

    For ``--resume``: check this before touching a run another engine still serves.
    """
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(Path(run_dir))
    try:
        connect(rd, timeout=1.0).close()  # a link, or a socket of another uid, is no engine of this run
    except (OSError, ChannelError):
        return False
    return True


def read_line(sock: socket.socket, deadline: float, limit: int = MAX_LINE) -> bytes | None:
    """One reply line (without the newline) before ``deadline`` (time.monotonic); None on EOF.

    Raises TimeoutError when the deadline passes and ValueError for a line over ``limit``.
    """
    buf = bytearray()
    while True:
        cut = buf.find(b"\n")
        if cut >= 0:
            return bytes(buf[:cut])
        if len(buf) > limit:
            raise ValueError(f"reply over {limit} bytes")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no reply in time")
        sock.settimeout(remaining)
        try:
            data = sock.recv(65536)
        except socket.timeout:
            raise TimeoutError("no reply in time") from None
        if not data:
            return None
        buf += data


def error_reply(text: str, request_id: Any = None) -> bytes:
    """The JSON line of an error reply."""
    rid = request_id if isinstance(request_id, str) and len(request_id) <= 64 else None
    return (json.dumps({"type": "error", "error": text, "request_id": rid}) + "\n").encode()
