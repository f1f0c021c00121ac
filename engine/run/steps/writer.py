"""StepWriter: appends rows of step metrics to a record (engine.run.steps.layout), crash-safe, one writer at a time.

A row is a step and any numbers by name. Rows are buffered by ``append`` and written by ``flush`` (the
drainer calls it once a pass: ~200 rows every 0.2 s at 1,000 steps/s), or handed over as whole columns by
``append_columns`` (conversion, benches). Writing one batch:

1. each series' new values, then its committed count (its pyramid catches up in one pass once
   ``SUMMARY_EVERY`` values are new: blocks, then the pyramid's own count);
2. the rows' steps, then the step file's count: the **commit**. A row is in the record once this count
   covers it; whatever a SIGKILL left past a count is never read, and the next writer overwrites it.

**Redo.** A row whose step is not above the last committed step starts a redo: every row from that step on
is dropped first (counts lowered; files never shrink), so the record keeps the last attempt of each step. A
resumed run redoes the steps after its checkpoint, a NaN rollback the steps after the checkpoint it reloads,
and the last of two rows logged for one step wins. ``truncate_after`` drops rows explicitly.

**Dense or sparse.** The StepLogged fields are dense from their first row: one value a row, NaN (0 for the
integer fields) where a row lacked it. Any other name starts sparse (its own steps, 12 bytes a value in
float32) and is promoted to dense (4 bytes) once it has been on every row since it first appeared, checked
at 128, 256, 512… values (2**BASE, doubling); a promoted series gets a new id with the same values and
pyramid, and the old files stay for a reader that still reads them. So an integration's 10,000 names logged
every hundredth step cost their own values only, and a component logged every step costs what a field does.

**Types.** Per field (docs/STEP_RECORD.md measures what float32 loses): ``t`` float64 (float32 at 1.7e9 s
is 128 s coarse), ``epoch`` and ``batch_size`` int32, ``skipped`` uint8, every other field float32 (relative
error ≤ 6e-8). Other names are float32, or float64 when the first value is an integer past 2**24 (a token
count, which float32 would round). Values past float32's range become ±inf.
"""

from __future__ import annotations

import dataclasses
import os
from collections import OrderedDict
from pathlib import Path
from typing import Mapping

import numpy as np

from engine.run.steps import layout, pyramid
from engine.run.steps.column import Column
from engine.run.steps.fields import FIELD_DTYPES, event_columns, event_row
from engine.run.steps.layout import HEADER, STEP_DTYPE, block_dtype, read_count, stored, total_blocks, write_count

#: Rows a bulk append writes at a time (bounds its memory).
BULK_ROWS = 1 << 20
#: Values a series' pyramid may lag behind it: the pyramid is brought up to date once this many are new (and on
#: close), in one pass; a reader takes the values past it raw (a few thousand at most).
SUMMARY_EVERY = 4096
#: Array files a writer keeps open (a run logging 10,000 names reopens the rest when it touches them).
OPEN_FILES = 256
_INT24 = float(1 << 24)


@dataclasses.dataclass
class _Series:
    id: int
    name: str
    dtype: np.dtype
    kind: str  # "dense" or "sparse"
    start: int = 0  # dense: the row of its first value
    count: int = 0
    summarised: int = 0  # values the pyramid covers (its own count): up to SUMMARY_EVERY behind ``count``
    first_step: int | None = None  # sparse: its first and last steps
    last_step: int | None = None
    next_check: int = 1 << layout.BASE  # sparse: the count at which promotion is looked at again
    files: tuple = ()  # (values, steps, pyramid) paths


    def entry(self) -> dict:
        out = {"id": self.id, "name": self.name, "dtype": self.dtype.str, "kind": self.kind}
        if self.kind == "dense":
            out["start"] = self.start
        return out


class _Files:
    """Open descriptors by path, the least recently used closed past ``OPEN_FILES``."""

    def __init__(self) -> None:
        self._fds: OrderedDict[Path, int] = OrderedDict()

    def __call__(self, path: Path) -> int:
        fd = self._fds.pop(path, None)
        if fd is None:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            if os.fstat(fd).st_size < HEADER:
                os.pwrite(fd, layout.header(0), 0)
            while len(self._fds) >= OPEN_FILES:
                os.close(self._fds.popitem(last=False)[1])
        self._fds[path] = fd
        return fd

    def sync_and_close(self) -> None:
        for fd in self._fds.values():
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._fds.clear()


def _read(fd: int, dtype: np.dtype, start: int, stop: int) -> np.ndarray:
    """Values ``[start, stop)`` of an array file."""
    data = os.pread(fd, (stop - start) * dtype.itemsize, HEADER + start * dtype.itemsize)
    return np.frombuffer(data, dtype, len(data) // dtype.itemsize)


class StepWriter:
    """Appends rows to the record in ``directory`` (created if missing); see the module docstring.

    Opening one repairs what a killed writer left: counts past the commit are lowered, so appends continue
    after the last complete row. One writer per record (the run directory's lock sees to it).
    """

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._files = _Files()
        self._step_path = self.directory / layout.STEP_FILE
        self._files(self._step_path)
        self.rows, self.last_step = 0, None
        self._series: dict[str, _Series] = {}
        self._next_id = 0
        self._open_catalog()
        self._reload()
        self._pending: list[tuple] = []  # (step, a mapping or a StepLogged event, whether an event)

    @property
    def _step_fd(self) -> int:
        """The step file's descriptor, through the open-file cache like every other (a batch touching more than
        OPEN_FILES files closes the least recently used: a descriptor kept from before would then be closed, or
        another file's)."""
        return self._files(self._step_path)

    # ------------------------------------------------------------------ opening
    def _open_catalog(self) -> None:
        path = self.directory / layout.CATALOG
        data = path.read_bytes() if path.exists() else b""
        entries, end = layout.parse_catalog(data)
        self._catalog = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        if not data:
            os.write(self._catalog, layout.catalog_line(layout.FORMAT))
        elif end < len(data):
            os.write(self._catalog, b"\n")  # a torn line ends here; it parses as nothing
        for entry in entries:
            if entry.get("format"):
                continue
            self._next_id = max(self._next_id, entry["id"] + 1)
            self._series[entry["name"]] = self._named(entry["id"], entry["name"], np.dtype(entry["dtype"]),
                                                      entry["kind"], int(entry.get("start", 0)))

    def _named(self, series_id: int, name: str, dtype: np.dtype, kind: str, start: int) -> _Series:
        return _Series(series_id, name, dtype, kind, start, files=layout.series_files(self.directory, series_id))

    def _recover(self, series: _Series) -> None:
        """Read a series' committed count, lowered to what the commit covers (a killed writer's batch)."""
        fd = self._values_fd(series)
        count = min(read_count(fd), stored(fd, series.dtype.itemsize))
        if series.kind == "dense":
            count = min(count, max(0, self.rows - series.start))
        elif count:
            steps_fd = self._files(series.files[1])
            steps = Column(steps_fd, STEP_DTYPE, min(count, stored(steps_fd, 8)))
            count = int(steps.searchsorted(np.array([self.last_step]), "right")[0]) if self.last_step is not None else 0
            if count:
                series.first_step, series.last_step = int(steps.slice(0, 1)[0]), int(steps.slice(count - 1, count)[0])
            while series.next_check <= count:
                series.next_check *= 2
        if count != read_count(fd):
            write_count(fd, count)
        series.count = count
        summary_fd = self._files(series.files[2])
        series.summarised = min(read_count(summary_fd), count)
        if stored(summary_fd, block_dtype(series.dtype).itemsize) < total_blocks(series.summarised):
            series.summarised = 0  # (never from a writer that follows the layout) rebuilt from the values

    # ------------------------------------------------------------------ appending
    def append(self, step: int, values: Mapping[str, float]) -> None:
        """Buffer one row: ``step`` and numbers by name (written by the next ``flush``)."""
        self._pending.append((int(step), values, False))

    def append_event(self, event) -> None:
        """Buffer a StepLogged event's row: its numeric fields, and its components as ``components.<name>``."""
        self._pending.append((int(event.step), event, True))

    @property
    def pending(self) -> int:
        """Rows buffered and not yet written."""
        return len(self._pending)

    def flush(self) -> None:
        """Write the buffered rows (a row whose step is not above the previous one starts a redo).

        A write that fails (OSError: a full disk) leaves the rows not yet committed buffered, in order, and the
        writer as the files say (``_reload``): the next flush retries them from the last commit.
        """
        rows, self._pending = self._pending, []
        start = 0
        try:
            for i in range(1, len(rows) + 1):
                if i == len(rows) or rows[i][0] <= rows[i - 1][0]:
                    self._commit_rows(rows[start:i])
                    start = i
        except OSError:
            self._pending = rows[start:] + self._pending
            self._reload()
            raise

    def append_columns(self, steps: np.ndarray, columns: Mapping[str, np.ndarray]) -> None:
        """Write whole columns at once (every name dense; NaN where absent): the bulk path.

        ``steps`` must increase strictly; its first step may redo earlier ones.
        """
        self.flush()
        steps = np.asarray(steps, np.int64)
        if len(steps) > 1 and not (np.diff(steps) > 0).all():
            raise ValueError("append_columns: steps must increase strictly")
        for lo in range(0, len(steps), BULK_ROWS):
            part = steps[lo:lo + BULK_ROWS]
            index = np.arange(len(part))
            self._commit(part, {name: (index, np.asarray(values)[lo:lo + BULK_ROWS])
                                for name, values in columns.items()}, dense=True)

    def truncate_after(self, step: int) -> None:
        """Drop every row past ``step`` (a resumed run's start step; its next rows carry on from there)."""
        self.flush()
        if self.last_step is not None and self.last_step > step:
            try:
                self._cut(step + 1)
            except OSError:
                self._reload()
                raise

    def _reload(self) -> None:
        """Take the commit and every series' counts from the files again (after a write that failed midway)."""
        self.rows = min(read_count(self._step_fd), stored(self._step_fd, 8))
        self.last_step = int(self._steps(self.rows - 1, self.rows)[0]) if self.rows else None
        for series in self._series.values():
            self._recover(series)

    def close(self) -> None:
        """Write what is buffered, bring every pyramid up to date, sync every open file and close them (once)."""
        if self._catalog is None:
            return
        self.flush()
        for series in self._series.values():
            if series.summarised < series.count:
                self._summarise(series)
        self._files.sync_and_close()
        os.close(self._catalog)
        self._catalog = None

    # ------------------------------------------------------------------ one batch
    def _commit_rows(self, rows: list) -> None:
        if not rows:
            return
        steps = np.fromiter((row[0] for row in rows), np.int64, len(rows))
        if all(row[2] for row in rows):
            try:
                return self._commit(steps, event_columns([row[1] for row in rows]))
            except (TypeError, ValueError):  # a value that is not a number: row by row below, without it
                pass
        by_name: dict[str, tuple[list[int], list[float]]] = {}
        for i, (_, values, is_event) in enumerate(rows):
            for name, value in (event_row(values) if is_event else values).items():
                try:
                    value = float(value)
                except (TypeError, ValueError):
                    continue  # not a number (None, a string): not a metric
                slot = by_name.get(name)
                if slot is None:
                    slot = by_name[name] = ([], [])
                slot[0].append(i)
                slot[1].append(value)
        self._commit(steps, {name: (np.array(index, np.int64), np.array(values, np.float64))
                             for name, (index, values) in by_name.items()})

    def _commit(self, steps: np.ndarray, entries: dict, dense: bool = False) -> None:
        """Rows of strictly increasing ``steps``; ``entries``: name → (row index in the batch, values)."""
        if self.last_step is not None and steps[0] <= self.last_step:
            self._cut(int(steps[0]))
        first = self.rows
        touched = []
        for name, (index, values) in entries.items():
            series = self._series.get(name) or self._create(name, values, first + int(index[0]),
                                                             dense or name in FIELD_DTYPES)
            if series.kind == "dense":
                self._write_dense(series, first + index, values)
            else:
                self._write_sparse(series, steps[index], values)
                touched.append(series)
        os.pwrite(self._step_fd, steps.astype(STEP_DTYPE).tobytes(), HEADER + first * 8)
        self._index(first, steps)
        self.rows = first + len(steps)
        write_count(self._step_fd, self.rows)
        self.last_step = int(steps[-1])
        for series in touched:
            if series.count >= series.next_check:
                self._maybe_promote(series)

    def _index(self, first: int, steps: np.ndarray) -> None:
        """The step index's entries for the rows ``first ..`` (layout.INDEX_FILE), before their commit."""
        lo = -(-first // layout.STRIDE)  # the first entry at or after row ``first``
        hi = -(-(first + len(steps)) // layout.STRIDE)
        if hi > lo:
            fd = self._files(self.directory / layout.INDEX_FILE)
            entries = steps[np.arange(lo, hi) * layout.STRIDE - first].astype(STEP_DTYPE)
            os.pwrite(fd, entries.tobytes(), HEADER + lo * 8)
            write_count(fd, hi)

    def _create(self, name: str, values: np.ndarray, row: int, dense: bool) -> _Series:
        dtype = FIELD_DTYPES.get(name)
        if dtype is None:
            first = float(values[0])
            dtype = "<f8" if first.is_integer() and abs(first) > _INT24 else "<f4"
        series = self._named(self._next_id, name, np.dtype(dtype), "dense" if dense else "sparse", row)
        self._next_id += 1
        self._add(series)
        return series

    def _add(self, series: _Series) -> None:
        """Make a series' files (empty), then name it in the catalogue."""
        values, steps, summary = series.files
        for path in (values, summary) if series.kind == "dense" else (values, steps, summary):
            write_count(self._files(path), 0)  # a file a killed writer left under this id counts nothing
        os.write(self._catalog, layout.catalog_line(series.entry()))
        self._series[series.name] = series

    def _values_fd(self, series: _Series) -> int:
        return self._files(series.files[0])

    def _cast(self, series: _Series, values: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            return np.asarray(values).astype(series.dtype)

    def _write_dense(self, series: _Series, rows: np.ndarray, values: np.ndarray) -> None:
        if series.count == 0 and series.start != rows[0]:  # a redo cut before its first row: it starts anew
            series.start = int(rows[0])
            os.write(self._catalog, layout.catalog_line(series.entry()))
        at = rows - series.start
        old = series.count
        new = int(at[-1]) + 1
        if new - old == len(at):
            data = self._cast(series, values)
        else:  # rows that lacked the name: NaN (0 for an integer field)
            data = np.full(new - old, np.nan if series.dtype.kind == "f" else 0, series.dtype)
            data[at - old] = self._cast(series, values)
        fd = self._values_fd(series)
        os.pwrite(fd, data.tobytes(), HEADER + old * series.dtype.itemsize)
        self._grow(series, fd, new)

    def _write_sparse(self, series: _Series, steps: np.ndarray, values: np.ndarray) -> None:
        old = series.count
        data = self._cast(series, values)
        steps_fd = self._files(series.files[1])
        os.pwrite(steps_fd, steps.astype(STEP_DTYPE).tobytes(), HEADER + old * 8)
        fd = self._values_fd(series)
        os.pwrite(fd, data.tobytes(), HEADER + old * series.dtype.itemsize)
        if series.first_step is None or old == 0:
            series.first_step = int(steps[0])
        series.last_step = int(steps[-1])
        self._grow(series, fd, old + len(data))

    def _grow(self, series: _Series, fd: int, new: int) -> None:
        """Commit the series' new count; its pyramid catches up once SUMMARY_EVERY values are new."""
        series.count = new
        write_count(fd, new)
        if new - series.summarised >= SUMMARY_EVERY:
            self._summarise(series)

    def _summarise(self, series: _Series) -> None:
        """Bring a series' pyramid up to its count: the blocks, then the pyramid's own count."""
        pyramid.catch_up(self._values_fd(series), self._files(series.files[2]), series.dtype, series.summarised,
                         series.count)
        series.summarised = series.count

    # ------------------------------------------------------------------ redo and promotion
    def _steps(self, start: int, stop: int) -> np.ndarray:
        return _read(self._step_fd, STEP_DTYPE, start, stop)

    def _row_of(self, step: int) -> int:
        """The first row whose step is ``step`` or more (the step index, then one slab of the step file)."""
        index_fd = self._files(self.directory / layout.INDEX_FILE)
        entries = min(-(-self.rows // layout.STRIDE), read_count(index_fd), stored(index_fd, 8))
        sample = [Column(index_fd, STEP_DTYPE, entries).slice(0, entries)]
        return int(Column(self._step_fd, STEP_DTYPE, self.rows, 0, sample).searchsorted(np.array([step]))[0])

    def _cut(self, step: int) -> None:
        """Drop every row from ``step`` on: the commit first, then each series' count."""
        rows = self._row_of(step)
        self.rows = rows
        write_count(self._step_fd, rows)
        self.last_step = int(self._steps(rows - 1, rows)[0]) if rows else None
        for series in self._series.values():
            if series.kind == "dense":
                keep = min(series.count, max(0, rows - series.start))
            elif series.count and series.last_step is not None and series.last_step >= step:
                steps = Column(self._files(series.files[1]), STEP_DTYPE, series.count)
                keep = int(steps.searchsorted(np.array([step]))[0])
                series.last_step = int(steps.slice(keep - 1, keep)[0]) if keep else None
            else:
                continue
            if keep != series.count:
                series.count = keep
                write_count(self._values_fd(series), keep)
            if series.summarised > keep:
                series.summarised = keep
                write_count(self._files(series.files[2]), keep)

    def _maybe_promote(self, series: _Series) -> None:
        """A sparse series that has been on every row since its first becomes dense (module docstring)."""
        while series.next_check <= series.count:
            series.next_check *= 2
        start = self._row_of(series.first_step)
        if series.count != self.rows - start:
            return
        old_values, _, old_summary = series.files
        values = _read(self._files(old_values), series.dtype, 0, series.count)
        blocks = block_dtype(series.dtype)
        summary = os.pread(self._files(old_summary), total_blocks(series.summarised) * blocks.itemsize, HEADER)
        dense = self._named(self._next_id, series.name, series.dtype, "dense", start)
        self._next_id += 1
        new_values, _, new_summary = dense.files
        summary_fd = self._files(new_summary)
        os.pwrite(summary_fd, summary, HEADER)
        write_count(summary_fd, series.summarised)
        fd = self._files(new_values)
        os.pwrite(fd, values.tobytes(), HEADER)
        write_count(fd, series.count)
        dense.count, dense.summarised = series.count, series.summarised
        os.write(self._catalog, layout.catalog_line(dense.entry()))  # readers switch once it is complete
        self._series[series.name] = dense

