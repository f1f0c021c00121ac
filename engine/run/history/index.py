"""``events.index``: what engine.run.history.store read from an events.jsonl, saved so the next viewer opens it at once.

Why: decoding a 1M-step log costs ~1.5–3 s of CPU even with msgspec; loading
the same columns back is a ~100 MB memory copy (~0.1 s). A run's log is
append-only, so an index that covers its first N bytes stays true while the
file grows: the reader loads it and decodes only what came after.

Format (one file beside events.jsonl, written to a temporary name and renamed,
so a reader never sees half of one): ``MAGIC``, an 8-byte little-endian header
length, a JSON header (msgspec) naming the arrays, then their raw bytes:
every event's byte offset, line length and row (a step-column row, or
``-1 - k`` for the k-th other event), and one float64 column per step field.
No pickle anywhere. The other events (a few percent of the lines) are not
stored: they are re-read from the log by offset and decoded, so they always
equal what the log says.

Staleness: the header records how many bytes it covers and the file's first
and last ``_PROBE`` bytes of that span; a file that is shorter, or whose
bytes there differ (truncated, replaced by a new run, rewritten), makes the
index invalid, and any damage (bad magic, short arrays, a row that does not
decode) does too: the reader then decodes the whole file and writes a new
index. A directory the viewer cannot write to just gets no index.

Cost on disk: 8 bytes per step value (~12 columns) + 24 bytes per event,
about a third of the log's size.
"""

from __future__ import annotations

import mmap
import os
import secrets
from pathlib import Path
from typing import BinaryIO

import msgspec
import numpy as np

from engine.core.safe_files import open_for_write, open_regular
from engine.run.history.store import History, parse_lines

#: First bytes of an index file (the number is the format's version).
MAGIC = b"sensorlm-tui events index 1\n"
#: The index's file name, beside events.jsonl.
NAME = "events.index"
#: Logs shorter than this are decoded faster than an index is written: none is kept.
MIN_INDEX_BYTES = 4 << 20
#: An index is rewritten once the log has grown by this much past what it covers.
REWRITE_BYTES = 16 << 20
#: Bytes compared at the start and the end of the covered span to tell the same file.
_PROBE = 256

_HEADER = msgspec.json.Decoder(dict)


def path_for(events: Path) -> Path:
    """Where the index of ``events`` lives."""
    return Path(events).with_name(NAME)


def _probe(handle: BinaryIO, offset: int) -> tuple[str, str]:
    handle.seek(0)
    head = handle.read(min(_PROBE, offset))
    handle.seek(max(0, offset - _PROBE))
    tail = handle.read(min(_PROBE, offset))
    return head.hex(), tail.hex()


def load(events: Path, history: History, handle: BinaryIO) -> int:
    """Fill ``history`` from a valid index of ``events`` (open as ``handle``); returns the bytes it covers, or 0.

    The index is a cache, so a bad one costs nothing: a FIFO in its place is never opened for blocking (it
    hung ``plot``), and one larger than ``max_bytes`` of its log is not read (a sparse 3 GB file took 28 s
    and 3.3 GB of memory). Either is passed over like a stale index, and replaced when the next is written.
    """
    try:
        index = open_regular(path_for(events), max_bytes(os.fstat(handle.fileno()).st_size))
    except OSError:
        return 0
    try:
        with index:
            return _load(index, history, handle)
    except (ValueError, KeyError, TypeError, IndexError, OSError, msgspec.DecodeError):
        return 0


def _load(index: BinaryIO, history: History, handle: BinaryIO) -> int:
    if index.read(len(MAGIC)) != MAGIC:
        return 0
    left = os.fstat(index.fileno()).st_size - len(MAGIC) - 8  # bytes after the length: no field may claim more
    size = int.from_bytes(index.read(8), "little")
    if size > left:
        return 0
    header = _HEADER.decode(index.read(size))
    left -= size
    offset = int(header["offset"])
    if os.fstat(handle.fileno()).st_size < offset or _probe(handle, offset) != (header["head"], header["tail"]):
        return 0
    arrays: dict[str, np.ndarray] = {}
    for name, dtype, count in header["arrays"]:
        # Read straight into each array (one copy out of the page cache, not a bytes object and then a copy).
        dtype = np.dtype(dtype)
        if dtype.kind not in "iuf" or not 0 <= int(count) * dtype.itemsize <= left:
            return 0
        values = np.empty(int(count), dtype)
        if index.readinto(memoryview(values).cast("B")) != values.nbytes:
            return 0
        left -= values.nbytes
        arrays[name] = values
    offsets, lengths, rows = arrays.pop("offsets"), arrays.pop("lengths"), arrays.pop("rows")
    columns = {name.removeprefix("col:"): values for name, values in arrays.items()}
    n_rows = int((rows >= 0).sum())
    if not (len(offsets) == len(lengths) == len(rows)) or any(len(v) != n_rows for v in columns.values()):
        return 0
    if n_rows and "step" not in columns:
        return 0
    where = np.flatnonzero(rows < 0)
    if not np.array_equal(rows[where], -1 - np.arange(len(where))) or (len(where) and (
            offsets[where].min() < 0 or (offsets[where] + lengths[where]).max() > offset)):
        return 0
    objects: list = []
    if len(where):
        # Sliced from a map of the log (no read call per line), then decoded together
        # (engine.run.history.store.parse_lines).
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            lines = [mapped[a:a + n] for a, n in zip(offsets[where].tolist(), lengths[where].tolist())]
        objects = parse_lines(lines)
        if any(event is None for event in objects):
            return 0
    history.restore(offsets, lengths, rows, columns, objects, offset, int(header["skipped"]))
    return offset


def max_bytes(log_bytes: int) -> int:
    """The largest index a log of ``log_bytes`` can have: 24 bytes an event and 8 a step value against a line of
    at least ~100 bytes is about a third of it (module docstring); twice the log, plus a header, is never real."""
    return 2 * log_bytes + (1 << 20)


def worth_writing(history: History, covered: int) -> bool:
    """Whether to (re)write the index after reading: a long log with none, or one that grew well past it."""
    return history.offset >= MIN_INDEX_BYTES and (not covered or history.offset - covered >= REWRITE_BYTES)


def save(history: History) -> None:
    """Write ``history``'s index beside its log (atomically); silently nothing where that is not possible."""
    if history.path is None:
        return
    target = path_for(history.path)
    temp = target.with_name(f".{NAME}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        with open(history.path, "rb") as handle:
            head, tail = _probe(handle, history.offset)
        arrays = [(name, values.astype("<f8" if name.startswith("col:") else "<i8"))
                  for name, values in history.index_arrays().items()]
        header = msgspec.json.encode({"offset": history.offset, "skipped": history.skipped, "head": head,
                                      "tail": tail, "arrays": [(n, a.dtype.str, len(a)) for n, a in arrays]})
        # a new file of a random name, never through a link: a viewer run as root must not write where a link
        # planted in someone's run directory points
        with os.fdopen(open_for_write(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "wb") as out:
            out.write(MAGIC + len(header).to_bytes(8, "little") + header)
            for _, values in arrays:
                out.write(memoryview(np.ascontiguousarray(values)).cast("B"))
        os.replace(temp, target)
    except OSError:  # read-only run directory, disk full, the run removed meanwhile: no index, no harm
        try:
            temp.unlink()
        except OSError:
            pass
