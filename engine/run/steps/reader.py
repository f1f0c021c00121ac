"""StepRecord: a read-only view of a step record; nothing is read before it is asked for.

Opening reads the step file's header and the catalogue (names only). A series' files are opened the first
time it is asked for, and its values are read by position (engine.run.steps.column): a window reads its own
values, an envelope a few pyramid records and the raw edges of each column, a search one slab a key. A reader
holds what it was asked for and a coarse index of each sorted column (1/4096 of it), never a whole column, so
its memory is set by the screen and not by the run.

Consistency: ``refresh()`` takes a snapshot of the commit (rows, last step) and the catalogue's new lines;
every call until the next refresh answers for that snapshot, clamping each series to it (a writer appending
meanwhile adds values past it, which are ignored until then). A refresh that finds the writer redid steps (a
resumed run) drops the coarse indexes, whose values may have changed.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.core.safe_files import open_regular
from engine.run.steps import layout
from engine.run.steps.column import Column
from engine.run.steps.envelope import Envelope, envelope
from engine.run.steps.layout import STEP_DTYPE, block_dtype, block_position, read_count, stored, total_blocks

#: Series whose files stay open at once (a run with 10,000 names keeps the ones a viewer draws).
OPEN_SERIES = 128


@dataclass(frozen=True)
class Series:
    """One name as of the reader's snapshot: ``steps`` and ``values`` side by side, and its pyramid ``blocks``
    (engine.run.steps.column.Column each: ``slice``, ``take``, ``searchsorted``; ``np.asarray`` reads it all)."""

    name: str
    kind: str
    dtype: np.dtype
    steps: Column
    values: Column
    blocks: Column
    #: Values the pyramid covers (from the first); the rest, a few thousand at most, are read raw.
    summarised: int


@dataclass(frozen=True)
class Summary:
    """The complete blocks of one pyramid level: each block's first step, its min / max / last / has-NaN, and
    the sum and count of its finite values."""

    level: int
    first_step: np.ndarray
    min: np.ndarray
    max: np.ndarray
    last: np.ndarray
    nan: np.ndarray
    sum: np.ndarray
    finite: np.ndarray


def _open(path: Path):
    """A regular file's handle (closed when the last Column reading it is gone), None when it is not there;
    OSError for a FIFO or device under a record's name (opening one would wait for a writer forever)."""
    try:
        return open_regular(path)
    except FileNotFoundError:
        return None


class StepRecord:
    """Read a step record (module docstring). ``path``: a run directory or its ``steps/`` directory."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.directory = layout.record_dir(path)
        if not (self.directory / layout.STEP_FILE).exists():
            raise FileNotFoundError(f"{self.directory}: no step record here")
        self._step_file = _open(self.directory / layout.STEP_FILE)
        self._index_file = _open(self.directory / layout.INDEX_FILE)  # (None in a record that has none yet)
        self._catalog_at = 0
        self._entries: dict[str, dict] = {}
        self._files: OrderedDict[int, tuple] = OrderedDict()
        self._samples: dict[str, list] = {}  # a coarse index per sorted file (Column's ``sample``), by name
        self.rows = 0
        self.last_step: int | None = None
        self.first_step: int | None = None
        self._step_column = Column(None, STEP_DTYPE, 0)
        self.refresh()

    def __enter__(self) -> "StepRecord":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Let go of every file (columns handed out keep theirs open until they are gone)."""
        self._files.clear()
        self._samples.clear()

    # ------------------------------------------------------------------ following
    def refresh(self) -> bool:
        """Take in what the writer committed since the last look: new rows and new names (read from where the
        last look stopped; nothing else). True when anything changed."""
        added = self._read_catalog()
        fd = self._step_file.fileno()
        rows = min(read_count(fd), stored(fd, STEP_DTYPE.itemsize))
        column = Column(self._step_file, STEP_DTYPE, rows)
        last = int(column.slice(rows - 1, rows)[0]) if rows else None
        seen = self.rows and rows >= self.rows and int(column.slice(self.rows - 1, self.rows)[0]) == self.last_step
        if self.rows and not seen:  # the writer redid steps: what was read of the files may have changed
            self._samples.clear()
        column = Column(self._step_file, STEP_DTYPE, rows, 0, self._step_index(rows))
        changed = added or rows != self.rows or last != self.last_step
        self.rows, self._step_column, self.last_step = rows, column, last
        self.first_step = int(column.slice(0, 1)[0]) if rows else None
        return bool(changed)

    def _step_index(self, rows: int) -> list:
        """The step file's coarse sample, extended from ``step.idx`` to cover ``rows`` (one read of what is new)."""
        sample = self._samples.setdefault(layout.STEP_FILE, [])
        have = sample[0] if sample else np.zeros(0, np.int64)
        wanted = -(-rows // layout.STRIDE)
        if len(have) < wanted and self._index_file is None:
            self._index_file = _open(self.directory / layout.INDEX_FILE)  # made since this reader opened
        if len(have) < wanted and self._index_file is not None:
            fd = self._index_file.fileno()
            entries = min(wanted, read_count(fd), stored(fd, 8))
            sample[:] = [np.concatenate([have, Column(fd, STEP_DTYPE, entries).slice(len(have), entries)])]
        return sample

    def _read_catalog(self) -> bool:
        try:
            with open_regular(self.directory / layout.CATALOG) as handle:
                handle.seek(self._catalog_at)
                data = handle.read()
        except FileNotFoundError:
            return False
        entries, used = layout.parse_catalog(data)
        self._catalog_at += used
        for entry in entries:
            if not entry.get("format"):
                self._entries[entry["name"]] = entry
        return bool(entries)

    # ------------------------------------------------------------------ what is there
    def names(self) -> list[str]:
        """Every name the record holds, in the order they first appeared (no value is read)."""
        return list(self._entries)

    def steps(self) -> np.ndarray:
        """The step of every row (read whole: a tool's call, not a viewer's)."""
        return self._step_column.slice(0, self.rows)

    def series(self, name: str) -> Series:
        """One name's steps, values and pyramid as of the snapshot (KeyError for a name not in the record)."""
        entry = self._entries[name]
        values_file, steps_file, blocks_file = self._files_of(entry["id"])
        dtype = np.dtype(entry["dtype"])
        count = min(read_count(values_file.fileno()), stored(values_file.fileno(), dtype.itemsize)) \
            if values_file is not None else 0
        if entry["kind"] == "dense":
            start = int(entry.get("start", 0))
            count = min(count, max(0, self.rows - start))
            steps = self._step_column.view(start, count)
        else:
            count = min(count, stored(steps_file.fileno(), 8)) if steps_file is not None and self.rows else 0
            steps = Column(steps_file, STEP_DTYPE, count, 0, self._samples.setdefault(f"{entry['id']}.k", []))
            count = int(steps.searchsorted(np.array([self.last_step]), "right")[0]) if count else 0
            steps = steps.view(0, count)
        summarised = min(read_count(blocks_file.fileno()), count) if blocks_file is not None else 0
        kind = block_dtype(dtype)
        if blocks_file is None or stored(blocks_file.fileno(), kind.itemsize) < total_blocks(summarised):
            summarised = 0  # (never from a writer that follows the layout): every value read raw
        return Series(name, entry["kind"], dtype, steps, Column(values_file, dtype, count),
                      Column(blocks_file, kind, total_blocks(summarised)), summarised)

    def _files_of(self, series_id: int) -> tuple:
        files = self._files.pop(series_id, None)
        if files is None:
            files = tuple(_open(path) for path in layout.series_files(self.directory, series_id))
            while len(self._files) >= OPEN_SERIES:
                self._files.popitem(last=False)
        self._files[series_id] = files
        return files

    # ------------------------------------------------------------------ reading
    def envelope(self, name: str, step_lo: int, step_hi: int, columns: int) -> Envelope:
        """Per pixel column of ``[step_lo, step_hi]`` split in ``columns``: min, max and last of ``name``'s values,
        exactly what a pass over every raw value would give (engine.run.steps.envelope.Envelope says how NaN and
        inf count), from summary blocks inside each column and raw values only at its edges."""
        series = self.series(name)
        return envelope(series.steps, series.values, series.blocks, series.summarised, step_lo, step_hi, columns)

    def window(self, name: str, step_lo: int, step_hi: int) -> tuple[np.ndarray, np.ndarray]:
        """Steps and values (float64) of ``name`` at ``step_lo <= step <= step_hi``."""
        series = self.series(name)
        lo, hi = _range(series.steps, step_lo, step_hi)
        return series.steps.slice(lo, hi), series.values.slice(lo, hi).astype(np.float64)

    def summary(self, name: str, level: int) -> Summary:
        """Every block of ``2**level`` values of ``name`` the pyramid holds (``level >= layout.BASE``; the newest
        values, up to engine.run.steps.writer.SUMMARY_EVERY, wait for the writer's next catch-up)."""
        if level < layout.BASE:
            raise ValueError(f"summary level {level}: the pyramid starts at level {layout.BASE}")
        series = self.series(name)
        index = np.arange(series.summarised >> level)
        blocks = series.blocks.take(block_position(level, index))
        return Summary(level, series.steps.take(index << level), blocks["min"].astype(np.float64),
                       blocks["max"].astype(np.float64), blocks["last"].astype(np.float64), blocks["nan"].astype(bool),
                       np.array(blocks["sum"]), blocks["finite"].astype(np.int64))

    def columns(self, names: list[str] | None = None, step_lo: int | None = None,
                step_hi: int | None = None) -> dict[str, np.ndarray]:
        """Rows ``step_lo <= step <= step_hi`` (all by default) as ``{"step": ..., name: ...}``, every name
        aligned on the rows: NaN where a row lacks it. What pandas and polars take in one line."""
        rows = self._step_column.slice(*_range(self._step_column, step_lo, step_hi))
        out: dict[str, np.ndarray] = {"step": rows}
        for name in self.names() if names is None else names:
            out[name] = _aligned(self.series(name), rows)
        return out


def _range(steps: Column, step_lo: int | None, step_hi: int | None) -> tuple[int, int]:
    """The positions ``[lo, hi)`` of a sorted column's steps in ``step_lo ≤ step ≤ step_hi`` (None: no bound)."""
    lo = 0 if step_lo is None else int(steps.searchsorted(np.array([step_lo]), "left")[0])
    hi = len(steps) if step_hi is None else int(steps.searchsorted(np.array([step_hi]), "right")[0])
    return lo, max(lo, hi)


def _aligned(series: Series, rows: np.ndarray) -> np.ndarray:
    """A series' values on ``rows`` (steps): NaN where it has none."""
    first, last = _range(series.steps, rows[0], rows[-1]) if len(rows) else (0, 0)
    steps, values = series.steps.slice(first, last), series.values.slice(first, last)
    at = np.searchsorted(rows, steps)
    if len(steps) == len(rows):
        return values.copy()
    column = np.full(len(rows), np.nan, np.float32 if series.dtype == np.float32 else np.float64)
    column[at] = values
    return column


def open_record(path: str | os.PathLike) -> StepRecord:
    """A reader of the step record of a run directory (or of a ``steps/`` directory); FileNotFoundError if none."""
    return StepRecord(path)


def read_steps(path: str | os.PathLike, names: list[str] | None = None, step_lo: int | None = None,
               step_hi: int | None = None) -> dict[str, np.ndarray]:
    """A run's step metrics as aligned columns: ``pd.DataFrame(read_steps("runs/x"))`` (docs/STEP_RECORD.md)."""
    with StepRecord(path) as record:
        return record.columns(names, step_lo, step_hi)
