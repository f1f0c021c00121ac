"""Reading a file someone else named, with bounds on its type, its size and its nesting depth.

Every file the engine parses from outside goes through here: the run config,
a CSV, a data manifest, a model directory's config.json and tokenizer files,
the history index. Each bound is one failure that was seen:

- **type**: a FIFO as a config hung the reader until killed, and ``/dev/zero``
  read until memory ran out. The file is opened non-blocking (a FIFO's open
  would block until a writer came) and checked with ``fstat`` on the open
  descriptor, so a file swapped for a FIFO between a check and the open
  cannot slip through;
- **size**: checked from ``fstat`` before a byte is read, so a sparse 3 GB
  file is refused at once instead of read (28 s and 3.3 GB of memory);
- **depth**: ``json.loads`` recurses once per nested array or object, and a
  manifest nested 100,000 deep raised ``RecursionError``. The depth is
  counted before decoding (strings stripped, brackets summed), so a too-deep
  file is one line naming its limit, and a shallower one cannot exhaust the
  stack of the code that walks it afterwards.

Errors are ``OSError`` with ``strerror`` set (``FileNotFoundError``,
``IsADirectoryError``, ``EINVAL`` for a special file, ``EFBIG`` for size) or
``ValueError`` for JSON (``DeepJSON`` for depth), so each caller words the
one line with its own place (file:line, field, flag).

Writing a file in a run directory goes through here too (``open_for_write``,
``write_atomic``): never through a symbolic link (``O_NOFOLLOW``: a link an
attacker planted as ``engine.lock`` made root truncate the file it pointed
at), never into a FIFO or device, never into a file another uid owns or that
has a second hard link, and a replaced file is written beside it under a
random name (``O_EXCL``) and renamed into place, so a reader (or a disk that
fills mid-write) never sees half of it. Torch-free.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import stat
from itertools import accumulate
from pathlib import Path
from typing import IO, Any

#: Nesting a JSON file may have: a model config or a manifest is 3-6 deep; tokenizer.json about 5.
MAX_JSON_DEPTH = 64
#: A JSON string (with escapes) and everything that is not a bracket, removed before depth is counted.
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")


class DeepJSON(ValueError):
    """JSON nested deeper than the reader allows (``str()`` names the depth and the limit)."""


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "a special file"


def open_regular(path: str | Path, limit: int | None = None) -> IO[bytes]:
    """A blocking binary handle on a regular file of at most ``limit`` bytes (None: any size).

    FileNotFoundError, IsADirectoryError, OSError(EINVAL) for a FIFO, device
    or socket, OSError(EFBIG) for size; the descriptor is closed on every error.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, f"{_kind(info.st_mode)}, not a regular file")
        if limit is not None and info.st_size > limit:
            raise OSError(errno.EFBIG, f"{info.st_size} bytes, larger than the {_size(limit)} allowed")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | Path, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (errors as ``open_regular``).

    Reads at most ``limit + 1`` bytes even when the file grows after the
    size check, so the bound holds for a file being appended to as well.
    """
    with open_regular(path, limit) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"grew past the {_size(limit)} allowed while being read")
    return data


def json_depth(raw: bytes) -> int:
    """How deeply the arrays and objects of JSON text ``raw`` nest (brackets inside strings not counted)."""
    brackets = _NOT_BRACKET.sub(b"", _JSON_STRING.sub(b"", raw))
    if not brackets:
        return 0
    return max(0, max(accumulate(1 if b in b"[{" else -1 for b in brackets)))


def read_json(path: str | Path, limit: int, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """A regular file's JSON value: size at most ``limit`` bytes, nesting at most ``max_depth``.

    OSError as ``read_regular``; ``DeepJSON`` for depth; ``ValueError`` (a
    ``json.JSONDecodeError`` or ``UnicodeDecodeError``) for anything else.
    """
    raw = read_regular(path, limit)
    depth = json_depth(raw)
    if depth > max_depth:
        raise DeepJSON(f"nested {depth} levels deep; at most {max_depth} allowed")
    return json.loads(raw.decode("utf-8"))


def check_regular(path: str | Path, limit: int | None = None) -> None:
    """Raise as ``open_regular`` unless ``path`` is a regular file within ``limit``, for a file another
    library will read (a tokenizer's vocabulary, a model's weights)."""
    open_regular(path, limit).close()


class NotOurs(OSError):
    """A file to be written that this uid does not own, or that has another hard link (errno EPERM; not a
    PermissionError, which means the directory refused us)."""


#: What a refused symbolic link is called in a one-line error.
SYMLINK_WHY = "a symbolic link, not followed (the engine writes only files it made)"


def open_for_write(path: str | Path, flags: int, mode: int = 0o644) -> int:
    """A descriptor for writing ``path`` (``flags``: e.g. ``O_WRONLY | O_APPEND | O_CREAT``), never through a link.

    OSError(ELOOP) with ``SYMLINK_WHY`` for a symbolic link, OSError(EINVAL) for a FIFO, device or socket
    (opened non-blocking, so a FIFO without a reader cannot hang the open), OSError(EPERM) for a file this
    uid does not own or one with another hard link (``NotOurs``: a link to a file elsewhere, made while
    the directory was open to others); the descriptor is closed on every error.
    """
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, SYMLINK_WHY, str(path)) from None
        if exc.errno == errno.ENXIO:  # a FIFO nobody reads: refused by the non-blocking open itself
            raise OSError(errno.EINVAL, "a FIFO, not a regular file", str(path)) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, f"{_kind(info.st_mode)}, not a regular file", str(path))
        if info.st_uid != os.geteuid():
            raise NotOurs(errno.EPERM, f"owned by uid {info.st_uid}, not by this user (uid {os.geteuid()})",
                          str(path))
        if info.st_nlink > 1:
            raise NotOurs(errno.EPERM, f"has {info.st_nlink} hard links (a file shared with another place)",
                          str(path))
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (os.write may write less than asked)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_atomic(path: str | Path, data: bytes, *, durable: bool = True, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` atomically: a new temp file beside it (``O_EXCL``, a random name), written,
    fsynced when ``durable``, renamed over ``path`` (the rename replaces a link there, never follows it).

    On any error the temp file is removed and ``path`` is as it was: a disk that fills while a config is
    written leaves the old file or none, never an empty one. OSError as the failing call raised it.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    fd = open_for_write(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        try:
            write_all(fd, data)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(path.parent)


def fsync_dir(path: str | Path) -> None:
    """fsync a directory so a rename inside it survives a power cut (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _size(limit: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if limit >= 1 << shift and limit % (1 << shift) == 0:
            return f"{limit >> shift} {unit}"
    return f"{limit} bytes"
