"""StepRecord: a read-only view of a step record, every file memory-mapped, nothing read before it is asked for.

Opening reads the step file's header and the catalogue (names only). A series is mapped the first time it is
asked for, and its values are read by numpy straight from the page cache: a window reads its own pages, an
envelope a few pyramid records and the raw edges of each column. A reader holds what it was asked for, never a
whole column as Python objects, so its memory is set by the screen and not by the run.

Consistency: ``refresh()`` takes a snapshot of the commit (rows, last step) and the catalogue's new lines;
every call until the next refresh answers for that snapshot, clamping each series to it (a writer appending
meanwhile adds values past it, which are ignored until then). Files never shrink (engine.run.steps.layout), so
a mapped page never goes away under a reader.
"""

from __future__ import annotations

import mmap
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.run.steps import layout
from engine.run.steps.envelope import Envelope, envelope
from engine.run.steps.layout import HEADER, STEP_DTYPE, block_dtype, block_position, total_blocks

#: Series kept mapped at once (a run with 10,000 names maps the ones a viewer draws).
MAPPED_SERIES = 512


class _Map:
    """A read-only map of one array file, remapped when a count asks for more than it covers."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._map: mmap.mmap | None = None

    def _cover(self, nbytes: int) -> bool:
        if self._map is not None and len(self._map) >= nbytes:
            return True
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            if os.fstat(fd).st_size < HEADER:
                return False
            self._map = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        return True

    def count(self) -> int:
        """The committed count in the header (0 for a missing file)."""
        if not self._cover(HEADER) or self._map[: len(layout.MAGIC)] != layout.MAGIC:
            return 0
        return int.from_bytes(self._map[len(layout.MAGIC): len(layout.MAGIC) + 8], "little")

    def array(self, dtype: np.dtype, count: int) -> np.ndarray:
        """The first ``count`` values (fewer if the file holds fewer), mapped, not copied."""
        if count <= 0:
            return np.zeros(0, dtype)
        self._cover(HEADER + count * dtype.itemsize)  # a file shorter than its count gives what it holds
        if self._map is None:
            return np.zeros(0, dtype)
        count = min(count, (len(self._map) - HEADER) // dtype.itemsize)
        return np.frombuffer(self._map, dtype, count, HEADER)


@dataclass(frozen=True)
class Series:
    """One name's values as of the reader's snapshot: ``steps`` and ``values`` side by side (mapped)."""

    name: str
    kind: str
    dtype: np.dtype
    steps: np.ndarray
    values: np.ndarray
    blocks: np.ndarray
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


class StepRecord:
    """Read a step record (module docstring). ``path``: a run directory or its ``steps/`` directory."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.directory = layout.record_dir(path)
        if not (self.directory / layout.STEP_FILE).exists():
            raise FileNotFoundError(f"{self.directory}: no step record here")
        self._step_map = _Map(self.directory / layout.STEP_FILE)
        self._catalog_at = 0
        self._entries: dict[str, dict] = {}
        self._maps: OrderedDict[int, tuple[_Map, _Map, _Map]] = OrderedDict()
        self.rows = 0
        self.last_step: int | None = None
        self.first_step: int | None = None
        self._step_column = np.zeros(0, np.int64)
        self.refresh()

    def __enter__(self) -> "StepRecord":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Drop every map (arrays handed out keep theirs alive)."""
        self._maps.clear()
        self._step_map = _Map(self._step_map.path)

    # ------------------------------------------------------------------ following
    def refresh(self) -> bool:
        """Take in what the writer committed since the last look: new rows and new names (read from where the
        last look stopped; nothing else). True when anything changed."""
        added = self._read_catalog()
        rows = self._step_map.count()
        column = self._step_map.array(STEP_DTYPE, rows)
        rows = len(column)
        changed = added or rows != self.rows or (rows and int(column[-1]) != self.last_step)
        self.rows, self._step_column = rows, column
        self.first_step = int(column[0]) if rows else None
        self.last_step = int(column[-1]) if rows else None
        return bool(changed)

    def _read_catalog(self) -> bool:
        try:
            with open(self.directory / layout.CATALOG, "rb") as handle:
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
        """The step of every row (mapped)."""
        return self._step_column

    def series(self, name: str) -> Series:
        """One name's steps, values and pyramid as of the snapshot (KeyError for a name not in the record)."""
        entry = self._entries[name]
        values_map, steps_map, blocks_map = self._maps_of(entry["id"])
        dtype = np.dtype(entry["dtype"])
        count = values_map.count()
        if entry["kind"] == "dense":
            start = int(entry.get("start", 0))
            values = values_map.array(dtype, min(count, max(0, self.rows - start)))
            steps = self._step_column[start:start + len(values)]
        else:
            steps = steps_map.array(STEP_DTYPE, count if self.rows else 0)
            steps = steps[: int(np.searchsorted(steps, self.last_step, "right"))] if len(steps) else steps
            values = values_map.array(dtype, len(steps))
            steps = steps[: len(values)]
        summarised = min(blocks_map.count(), len(values))
        blocks = blocks_map.array(block_dtype(dtype), total_blocks(summarised))
        if len(blocks) < total_blocks(summarised):  # (never from a writer that follows the layout): all raw
            summarised, blocks = 0, blocks[:0]
        return Series(name, entry["kind"], dtype, steps, values, blocks, summarised)

    def _maps_of(self, series_id: int) -> tuple[_Map, _Map, _Map]:
        maps = self._maps.pop(series_id, None)
        if maps is None:
            maps = tuple(_Map(path) for path in layout.series_files(self.directory, series_id))
            while len(self._maps) >= MAPPED_SERIES:
                self._maps.popitem(last=False)
        self._maps[series_id] = maps
        return maps

    # ------------------------------------------------------------------ reading
    def envelope(self, name: str, step_lo: int, step_hi: int, columns: int) -> Envelope:
        """Per pixel column of ``[step_lo, step_hi]`` split in ``columns``: min, max and last of ``name``'s values,
        exactly what a pass over every raw value would give (engine.run.steps.envelope.Envelope says how NaN and
        inf count), from summary blocks inside each column and raw values only at its edges."""
        series = self.series(name)
        return envelope(series.steps, series.values, series.blocks, series.summarised, step_lo, step_hi, columns)

    def window(self, name: str, step_lo: int, step_hi: int) -> tuple[np.ndarray, np.ndarray]:
        """Steps and values (copies, float64) of ``name`` at ``step_lo <= step <= step_hi``."""
        series = self.series(name)
        lo = int(np.searchsorted(series.steps, step_lo, "left"))
        hi = int(np.searchsorted(series.steps, step_hi, "right"))
        return np.array(series.steps[lo:hi]), np.asarray(series.values[lo:hi], np.float64)

    def summary(self, name: str, level: int) -> Summary:
        """Every block of ``2**level`` values of ``name`` the pyramid holds (``level >= layout.BASE``; the newest
        values, up to engine.run.steps.writer.SUMMARY_EVERY, wait for the writer's next catch-up)."""
        if level < layout.BASE:
            raise ValueError(f"summary level {level}: the pyramid starts at level {layout.BASE}")
        series = self.series(name)
        blocks = series.blocks[block_position(level, np.arange(series.summarised >> level))]
        firsts = series.steps[np.arange(len(blocks)) << level]
        return Summary(level, np.array(firsts), blocks["min"].astype(np.float64), blocks["max"].astype(np.float64),
                       blocks["last"].astype(np.float64), blocks["nan"].astype(bool), np.array(blocks["sum"]),
                       blocks["finite"].astype(np.int64))

    def columns(self, names: list[str] | None = None, step_lo: int | None = None,
                step_hi: int | None = None) -> dict[str, np.ndarray]:
        """Rows ``step_lo <= step <= step_hi`` (all by default) as ``{"step": ..., name: ...}``, every name
        aligned on the rows: NaN where a row lacks it. What pandas and polars take in one line."""
        lo = 0 if step_lo is None else int(np.searchsorted(self._step_column, step_lo, "left"))
        hi = self.rows if step_hi is None else int(np.searchsorted(self._step_column, step_hi, "right"))
        rows = np.array(self._step_column[lo:hi])
        out: dict[str, np.ndarray] = {"step": rows}
        for name in self.names() if names is None else names:
            series = self.series(name)
            at = np.searchsorted(series.steps, rows, "left")
            found = at < len(series.steps)
            found[found] = series.steps[at[found]] == rows[found]
            if found.all():
                out[name] = np.array(series.values[at])
            else:
                column = np.full(len(rows), np.nan, np.float32 if series.dtype == np.float32 else np.float64)
                column[found] = series.values[at[found]]
                out[name] = column
        return out


def open_record(path: str | os.PathLike) -> StepRecord:
    """A reader of the step record of a run directory (or of a ``steps/`` directory); FileNotFoundError if none."""
    return StepRecord(path)


def read_steps(path: str | os.PathLike, names: list[str] | None = None, step_lo: int | None = None,
               step_hi: int | None = None) -> dict[str, np.ndarray]:
    """A run's step metrics as aligned columns: ``pd.DataFrame(read_steps("runs/x"))`` (docs/STEP_RECORD.md)."""
    with StepRecord(path) as record:
        return record.columns(names, step_lo, step_hi)
