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
one line with its own place (file:line, field, flag). Torch-free.
"""

from __future__ import annotations

import errno
import json
import os
import re
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


def _size(limit: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if limit >= 1 << shift and limit % (1 << shift) == 0:
            return f"{limit >> shift} {unit}"
    return f"{limit} bytes"
