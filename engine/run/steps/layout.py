"""The step record on disk: which files, their header, the catalogue of names, and where a summary block lives.

A record is a directory (``<run>/steps/``) of plain little-endian arrays, each file a 64-byte header then its
values, so numpy maps any of them without a copy:

- ``step.i8``: the step of every row (int64). Its header's count is the record's **commit**: a row exists
  once this count covers it, and the writer raises it last, after every value of the row is on disk.
- ``step.idx``: the step of every ``STRIDE``-th row, so a reader finds a step without searching the file.
- ``catalog.jsonl``: one JSON line per series (``{"id", "name", "dtype", "kind", "start"}``) after a format
  line. A name's last line wins (a sparse series promoted to dense gets a new id). Names are listed from
  here alone, without touching a value.
- ``<id>.v``: a series' values (float32, float64, int32 or uint8: ``dtype``); the header's count is how
  many are committed. A **dense** series holds one value per row from row ``start`` on (NaN where the name
  was absent); a **sparse** one holds only the steps it was logged at, in ``<id>.k`` (int64).
- ``<id>.p``: the series' summary pyramid, one record (min, max, last, nan, sum, finite) per complete block of
  ``2**k`` values for every ``k >= BASE``, in the order the blocks complete (``block_position``), so the
  file only ever grows at its end. Its header's count is how many of the series' values it covers: the
  writer brings it up to date every few thousand values, and a reader takes the ones past it raw.

Files never shrink while a run lives: a redo (a resumed run, a rollback) lowers the counts and later
writes overwrite what lies past them. A reader that maps a file therefore never faults on a page that
went away, and whatever lies past a count (a torn write, a superseded attempt) is never read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

#: The record's directory inside a run directory.
DIRNAME = "steps"
#: First bytes of every array file (the digit is the layout's version).
MAGIC = b"sensorlm-tui-steps3\n"
#: Bytes before the values of every array file: MAGIC, the little-endian uint64 count, zeros.
HEADER = 64
#: Byte offset of the committed count in every array file's header.
COUNT_AT = len(MAGIC)
#: The first line of catalog.jsonl.
FORMAT = {"format": "sensorlm-tui step record", "version": 1}
#: log2 of the smallest summary block: 128 values. Raw values are read only at the ragged edges of a pixel
#: column (at most 127 on each side, half a kilobyte of float32); the pyramid costs 1/64 of a block record per
#: value: 25 bytes for a float32 series (min, max, last, nan, sum, finite), 0.4 bytes a step, which keeps the
#: default metrics' record under 64 bytes a step (docs/STEP_RECORD.md).
BASE = 7
#: The step column's file and the catalogue's.
STEP_FILE = "step.i8"
#: The step of every STRIDE-th row (rows 0, STRIDE, 2·STRIDE, …): a reader's coarse index of the step file,
#: read in one go instead of searched for (engine.run.steps.column). The writer writes an entry before the
#: commit that covers its row; entries past the commit are never read.
INDEX_FILE = "step.idx"
#: Rows between two entries of the step index (a searched key then reads one 4 KB slab of the step file).
STRIDE = 512
CATALOG = "catalog.jsonl"
STEP_DTYPE = np.dtype("<i8")


def record_dir(run_or_record: str | os.PathLike) -> Path:
    """The record directory of a run directory (a path already naming a record is returned as is)."""
    path = Path(run_or_record)
    return path if (path / STEP_FILE).exists() or path.name == DIRNAME else path / DIRNAME


def block_dtype(dtype: np.dtype) -> np.dtype:
    """A summary block's record for values of ``dtype``: min, max, last (that dtype), a has-NaN flag, and the sum
    (float64) and count of its finite values, so a viewer draws a column's mean (a smoothed line at any zoom)
    from the same few blocks as its extremes."""
    return np.dtype([("min", dtype), ("max", dtype), ("last", dtype), ("nan", "u1"), ("sum", "<f8"),
                     ("finite", "<u4")])


def series_files(directory: Path, series_id: int) -> tuple[Path, Path, Path]:
    """(values, steps, pyramid) files of a series."""
    return directory / f"{series_id}.v", directory / f"{series_id}.k", directory / f"{series_id}.p"


# ---------------------------------------------------------------- headers

def header(count: int) -> bytes:
    """The 64 header bytes of an array file holding ``count`` committed values."""
    return MAGIC + int(count).to_bytes(8, "little") + bytes(HEADER - COUNT_AT - 8)


def write_count(fd: int, count: int) -> None:
    """Commit ``count`` values of an open array file (one aligned 8-byte write: whole or not at all)."""
    os.pwrite(fd, int(count).to_bytes(8, "little"), COUNT_AT)


def read_count(fd: int) -> int:
    """The committed count in an array file's header; 0 for a file too short or not of this format."""
    head = os.pread(fd, COUNT_AT + 8, 0)
    if len(head) < COUNT_AT + 8 or head[:COUNT_AT] != MAGIC:
        return 0
    return int.from_bytes(head[COUNT_AT:], "little")


def stored(fd: int, itemsize: int) -> int:
    """Whole values physically present in an array file (a bound on any count read from it)."""
    return max(0, (os.fstat(fd).st_size - HEADER) // itemsize)


# ---------------------------------------------------------------- the catalogue

def parse_catalog(data: bytes) -> tuple[list[dict], int]:
    """Entries of the complete lines of catalogue bytes, and how many bytes they span (a torn tail is left)."""
    end = data.rfind(b"\n") + 1
    entries = []
    for line in data[:end].splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a torn line a crash left, terminated by the next writer
        if isinstance(entry, dict) and isinstance(entry.get("id"), int) and isinstance(entry.get("name"), str):
            entries.append(entry)
    return entries, end


def catalog_line(entry: dict) -> bytes:
    """One catalogue line."""
    return (json.dumps(entry, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


# ---------------------------------------------------------------- the pyramid's arithmetic

def total_blocks(count: int) -> int:
    """Blocks of every level complete in a series of ``count`` values (the pyramid file's record count):
    Σ_{k>=BASE} floor(count / 2**k)."""
    total, rest = 0, int(count) >> BASE
    while rest:
        total += rest
        rest >>= 1
    return total


def block_position(level: int, index: np.ndarray) -> np.ndarray:
    """Record index in the pyramid file of blocks ``index`` (an array) of level ``level``.

    Blocks are written as they complete: ordered by the value that ends them, and the smaller level first
    among blocks that end together. The blocks before block (k, i), whose end is E = (i + 1)·2**k, are those
    of every level that end at or before E (``total_blocks(E)``), less those that end exactly at E at a level
    above k (one per level j > k with 2**j dividing E) and itself: total_blocks(E) − (tz(E) − k) − 1, with
    tz(E) the trailing zero bits of E.
    """
    index = np.asarray(index, np.int64)
    if index.size <= 4:  # the common case of a small append: plain integers beat numpy's per-call cost
        out = []
        for i in index.tolist():
            end = (i + 1) << level
            out.append(total_blocks(end) - ((end & -end).bit_length() - 1 - level) - 1)
        return np.array(out, np.int64)
    ends = (index + 1) << level
    trailing = np.log2((ends & -ends).astype(np.float64)).astype(np.int64) - level  # exact: powers of two
    total = np.zeros(ends.shape, np.int64)
    rest = ends >> BASE
    for _ in range(int(rest.max()).bit_length() if rest.size else 0):
        total += rest
        rest >>= 1
    return total - trailing - 1
