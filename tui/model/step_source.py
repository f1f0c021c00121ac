"""Where the charts' per-step values come from: the run's step record, read only for what a frame draws.

Two sources with one surface (``rows``, ``first_step``, ``last_step``, ``names``, ``bounds``, ``envelope``,
``window``, ``before``, ``refresh``), named by the record's names (``loss``, ``components.mse``, ``t``, …):

- ``RecordSteps``: the run's step record (engine.run.steps), read by position. A frame reads the pyramid
  blocks and raw edges of its envelope (kilobytes, at any zoom) and the raw values of the window it smooths;
  ``refresh`` takes in what a live run appended (the catalogue's new lines, the commit count) and nothing
  else. Nothing is held per step, so the viewer's memory is set by the screen, not by the run.
- ``MemorySteps``: step events held in numpy arrays, for a session without a record (a test double, a
  scripted demo, a run whose record could not be written): the newest ``MEMORY_ROWS`` steps. Its envelope is
  a plain pass over those values, exactly what the record's gives.

The dashboard shows a loss component by its own name (``mse``), a name of the record by itself otherwise
(``chart_name`` / ``record_name``). Torch- and Textual-free.
"""

from __future__ import annotations

import math

import numpy as np

from engine.run.steps import Envelope, StepRecord
from engine.run.steps.envelope import column_edges

#: StepLogged fields a chart may show besides the loss (the record also holds t, epoch, batch_size, skipped).
CHART_FIELDS = ("grad_norm", "lr", "samples_per_s", "steps_per_s", "tokens_per_s", "mfu")
#: Fields a run that cannot measure them logs as 0 (no tokens counted, no FLOP peak on a CPU): listed only once
#: a positive value is there.
ZERO_UNKNOWN = ("tokens_per_s", "mfu")
#: Record names never charted (the step's time, epoch, batch size and skipped flag).
NOT_CHARTED = ("t", "epoch", "batch_size", "skipped")
#: Steps a session without a record keeps (the newest).
MEMORY_ROWS = 1 << 16
_COMPONENT = "components."


def chart_name(name: str) -> str:
    """How the dashboard names a record's series: a loss component by its own name unless a field has it."""
    if name.startswith(_COMPONENT):
        bare = name[len(_COMPONENT):]
        return name if bare in CHART_FIELDS or bare in NOT_CHARTED or bare == "loss" else bare
    return name


def record_name(name: str, names: list[str] | set[str]) -> str | None:
    """The record's name of the dashboard's ``name`` (None when the source has no such series)."""
    if name in names:
        return name
    component = _COMPONENT + name
    return component if component in names else None


def reduce_columns(steps: np.ndarray, values: np.ndarray, step_lo: int, step_hi: int, columns: int) -> Envelope:
    """The envelope of ``values`` (at increasing ``steps``) by one plain pass over every value: what
    engine.run.steps.envelope gives from a record's pyramid, for values held in memory."""
    edges = column_edges(step_lo, step_hi, columns)
    bounds = np.searchsorted(steps, edges, "left")
    a, b = bounds[:-1], bounds[1:]
    count = b - a
    lo = np.full(columns, np.nan)
    hi = np.full(columns, np.nan)
    last = np.full(columns, np.nan)
    last_step = np.full(columns, -1, np.int64)
    nan = np.zeros(columns, bool)
    total = np.zeros(columns)
    finite = np.zeros(columns, np.int64)
    used = np.flatnonzero(count)
    if len(used):
        start = int(a[used[0]])
        raw = np.asarray(values[start:int(b[used[-1]])], np.float64)
        first = a[used] - start
        lo[used] = np.fmin.reduceat(raw, first)
        hi[used] = np.fmax.reduceat(raw, first)
        nan[used] = np.logical_or.reduceat(np.isnan(raw), first)
        ok = np.isfinite(raw)
        total[used] = np.add.reduceat(np.where(ok, raw, 0.0), first)
        finite[used] = np.add.reduceat(ok.astype(np.int64), first)
        last[used] = values[b[used] - 1]
        last_step[used] = steps[b[used] - 1]
    return Envelope(edges[:-1], count, lo, hi, last, last_step, nan, total, finite)


class RecordSteps:
    """A run's step record as a chart source (module docstring); ``record`` is an open StepRecord."""

    def __init__(self, record: StepRecord) -> None:
        self.record = record
        #: Values read raw by ``window`` and ``before`` since opening (tests and the bench read it).
        self.values_read = 0

    @property
    def rows(self) -> int:
        """Rows (steps) committed as of the last refresh."""
        return self.record.rows

    @property
    def first_step(self) -> int | None:
        return self.record.first_step

    @property
    def last_step(self) -> int | None:
        return self.record.last_step

    def refresh(self) -> bool:
        """Take in what a live run appended since the last look; True when anything changed."""
        return self.record.refresh()

    def names(self) -> list[str]:
        """Every series the record holds, in the order they first appeared (no value is read)."""
        return self.record.names()

    def bounds(self, name: str) -> tuple[int, int] | None:
        """First and last step of a series (None when it has no value yet): two values read."""
        steps = self.record.series(name).steps
        n = len(steps)
        return (int(steps.slice(0, 1)[0]), int(steps.slice(n - 1, n)[0])) if n else None

    def envelope(self, name: str, step_lo: int, step_hi: int, columns: int) -> Envelope:
        """Per column of [step_lo, step_hi]: min / max / last / mean, exact (engine.run.steps.envelope)."""
        return self.record.envelope(name, step_lo, step_hi, columns)

    def window(self, name: str, step_lo: int, step_hi: int) -> tuple[np.ndarray, np.ndarray]:
        """Steps and values (float64 copies) of ``name`` at step_lo ≤ step ≤ step_hi."""
        steps, values = self.record.window(name, step_lo, step_hi)
        self.values_read += len(values)
        return steps, values

    def before(self, name: str, step: int, count: int) -> tuple[np.ndarray, np.ndarray, int]:
        """The last ``count`` values of ``name`` before ``step`` (steps, float64 values) and how many precede them."""
        series = self.record.series(name)
        end = int(series.steps.searchsorted(np.array([step]), "left")[0]) if len(series.steps) else 0
        start = max(0, end - count)
        self.values_read += end - start
        return series.steps.slice(start, end), series.values.slice(start, end).astype(np.float64), start

    def tail(self, name: str, count: int) -> tuple[np.ndarray, np.ndarray]:
        """The last ``count`` (steps, float64 values) of ``name``, by position (nothing searched)."""
        series = self.record.series(name)
        n = len(series.steps)
        start = max(0, n - count)
        return series.steps.slice(start, n), series.values.slice(start, n).astype(np.float64)

    def head(self, name: str) -> tuple[int, float] | None:
        """The first (step, value) of ``name`` (None: it has none)."""
        series = self.record.series(name)
        if not len(series.steps):
            return None
        return int(series.steps.slice(0, 1)[0]), float(series.values.slice(0, 1)[0])

    def last_values(self, names: list[str]) -> dict[str, float]:
        """The newest row's value of each of ``names`` that has one there (one value read per name)."""
        out = {}
        held = set(self.record.names())
        for name in names:
            if name in held:
                series = self.record.series(name)
                n = len(series.steps)
                if n and int(series.steps.slice(n - 1, n)[0]) == self.record.last_step:
                    out[name] = float(series.values.slice(n - 1, n)[0])
        return out


class MemorySteps:
    """Step events held in memory (module docstring): one row per step, NaN where a row lacks a name."""

    def __init__(self, capacity: int = MEMORY_ROWS) -> None:
        self.capacity = capacity
        self._steps = np.zeros(0, np.int64)
        self._columns: dict[str, np.ndarray] = {}
        self.values_read = 0

    @property
    def rows(self) -> int:
        return len(self._steps)

    @property
    def first_step(self) -> int | None:
        return int(self._steps[0]) if len(self._steps) else None

    @property
    def last_step(self) -> int | None:
        return int(self._steps[-1]) if len(self._steps) else None

    def refresh(self) -> bool:
        """Nothing to take in: rows arrive through ``append``."""
        return False

    def names(self) -> list[str]:
        return list(self._columns)

    def append(self, steps: np.ndarray, columns: dict[str, np.ndarray]) -> None:
        """Rows of increasing ``steps`` (a step at or below a held one first drops the held ones from there: a
        resumed run redoes them) with values by name (NaN where a row lacks one)."""
        steps = np.asarray(steps, np.int64)
        keep = latest_attempts(steps)
        if keep is not None:
            steps, columns = steps[keep], {name: np.asarray(v)[keep] for name, v in columns.items()}
        if not len(steps):
            return
        kept = int(np.searchsorted(self._steps, steps[0], "left"))
        old = len(self._steps)
        self._steps = np.concatenate([self._steps[:kept], steps])
        for name in dict.fromkeys([*self._columns, *columns]):
            held = self._columns.get(name, np.full(old, np.nan))[:kept]
            new = np.asarray(columns[name], np.float64) if name in columns else np.full(len(steps), np.nan)
            self._columns[name] = np.concatenate([held, new])
        if len(self._steps) > self.capacity:
            self._steps = self._steps[-self.capacity:].copy()
            self._columns = {name: values[-self.capacity:].copy() for name, values in self._columns.items()}

    def _series(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        values = self._columns[name]
        present = ~np.isnan(values)
        first = int(np.argmax(present)) if present.any() else len(values)  # a name exists from its first value on
        return self._steps[first:], values[first:]

    def bounds(self, name: str) -> tuple[int, int] | None:
        steps, _ = self._series(name)
        return (int(steps[0]), int(steps[-1])) if len(steps) else None

    def envelope(self, name: str, step_lo: int, step_hi: int, columns: int) -> Envelope:
        steps, values = self._series(name)
        return reduce_columns(steps, values, step_lo, step_hi, columns)

    def window(self, name: str, step_lo: int, step_hi: int) -> tuple[np.ndarray, np.ndarray]:
        steps, values = self._series(name)
        lo, hi = np.searchsorted(steps, step_lo, "left"), np.searchsorted(steps, step_hi, "right")
        self.values_read += int(hi - lo)
        return steps[lo:hi].copy(), values[lo:hi].copy()

    def before(self, name: str, step: int, count: int) -> tuple[np.ndarray, np.ndarray, int]:
        steps, values = self._series(name)
        end = int(np.searchsorted(steps, step, "left"))
        start = max(0, end - count)
        self.values_read += end - start
        return steps[start:end].copy(), values[start:end].copy(), start

    def tail(self, name: str, count: int) -> tuple[np.ndarray, np.ndarray]:
        steps, values = self._series(name)
        return steps[-count:].copy(), values[-count:].copy()

    def head(self, name: str) -> tuple[int, float] | None:
        steps, values = self._series(name)
        return (int(steps[0]), float(values[0])) if len(steps) else None

    def last_values(self, names: list[str]) -> dict[str, float]:
        if not len(self._steps):
            return {}
        return {name: float(self._columns[name][-1]) for name in names
                if name in self._columns and not math.isnan(self._columns[name][-1])}


def latest_attempts(step: np.ndarray) -> np.ndarray | None:
    """Rows to keep where steps were logged more than once (a crash, then a resume from an earlier checkpoint):
    the last attempt of each. None when every step is new (the common case: nothing to copy).

    A row survives when every later row has a larger step: a suffix minimum, O(n) in numpy.
    """
    if len(step) < 2 or bool(np.all(np.diff(step) > 0)):
        return None
    later_min = np.minimum.accumulate(step[::-1])[::-1]
    keep = np.ones(len(step), dtype=bool)
    keep[:-1] = step[:-1] < later_min[1:]
    return keep
