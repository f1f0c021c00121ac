"""A run's whole step history folded into the dashboard's rings in two stages: the newest rows now, the rest later.

Why: `attach` to a 1M-step run must show its first full frame within 2 s.
Folding every step (a 1M × 6 ring with four EMAs over a million points, one
ring per scalar) costs the UI thread most of a second of CPU, and the first
frame needs almost none of it: the charts open on the newest ``RECENT_STEPS``
steps and the progress panel on the last step. So the fold is split:

1. ``HistoryFold(history, capacity)`` takes the step columns (the History's
   own arrays, no copy) and drops superseded attempts (a crash, then a resume
   from an earlier checkpoint: the last attempt of each step is kept).
2. ``preview(names)``, on the UI thread before the first frame: the newest
   ``PREVIEW_ROWS`` rows with their EMAs. A debiased EMA forgets
   geometrically (a point ``W`` finite points back weighs ``a**W``), so
   starting the recursion ``W`` points before the tail, with ``a**W`` below
   float64 rounding (``W`` ≈ 3,900 at a = 0.99) and the true point count for
   the debiasing, gives the tail's values to rounding (tested against the
   full fold) for ~8k points of work instead of a million.
3. ``finish()``, on the session worker after the first frame is painted:
   every row, the fold the model always did (``ema_extend`` over the whole
   series). ``RunModel.adopt`` then swaps its rings for these in a few
   assignments. Until then a chart's full-history window shows the tail and
   says it is loading.

The first viewer of a long log has no ``events.index`` to load, and decoding
every step line is most of its cost (~2.4 s CPU at 1M steps). So the worker
reads a tail first (``RunClient.history_tail(TAIL_STEPS)``: every other event,
only the newest ``TAIL_STEPS`` steps, enough for the preview and its EMAs'
warm-up), and this fold's ``finish`` reads the whole log behind the first frame
(``engine.run.history.read.read_rest``, which also leaves the index for the next viewer).
The live poll starts only after ``finish``, so no step arrives in between.

Torch- and Textual-free; ``finish`` touches nothing but its own arrays, so
it may run on any thread.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from functools import partial
from typing import Callable

import numpy as np

from tui.model.ema import LEVELS, EmaState, ema_extend
from tui.model.history import Ring

#: Newest step rows folded before the first frame (the recent window shows 1,000).
PREVIEW_ROWS = 4096
#: Weight below which an old point no longer moves an EMA in float64 (the warm-up of a tail's EMA).
FORGET = 1e-17
#: Numeric StepLogged fields kept per step besides the loss (the model's scalar rings).
STEP_FIELDS = ("grad_norm", "lr", "samples_per_s", "steps_per_s", "tokens_per_s", "mfu")
#: Step fields where 0 means "not known" (engine.training.throughput: no tokens counted, no peak on a CPU): kept as NaN.
ZERO_UNKNOWN = ("tokens_per_s", "mfu")
#: Newest steps kept of each per-step scalar besides the loss: 2 × 8 bytes a step, 4 MiB a scalar.
SCALAR_CAPACITY = 1 << 18
# Columns of the step ring: step, raw loss, then one EMA per non-zero smoothing level.
STEP, LOSS = 0, 1


@dataclass
class StepRings:
    """The step part of a RunModel: the loss ring with its EMAs, their running states, one ring per scalar."""

    steps: Ring
    ema: list[EmaState]
    scalars: dict[str, Ring]


def latest_attempts(step: np.ndarray) -> np.ndarray | None:
    """Rows to keep where steps were logged more than once (crash, then resume from an earlier checkpoint):
    the last attempt of each. None when every step is new (the common case: nothing to copy).

    A row survives when every later row has a larger step: a suffix minimum, O(n) in numpy.
    """
    if len(step) < 2 or bool(np.all(np.diff(step) > 0)):
        return None
    later_min = np.minimum.accumulate(step[::-1])[::-1]
    keep = np.ones(len(step), dtype=bool)
    keep[:-1] = step[:-1] < later_min[1:]
    return keep


def warm_up(a: float) -> int:
    """Finite points an EMA of weight ``a`` needs before a value no longer depends on what came earlier."""
    return 0 if a <= 0.0 else math.ceil(math.log(FORGET) / math.log(a))


#: Step events a first open decodes of a long log without an index: the preview's rows and its EMAs' warm-up.
TAIL_STEPS = PREVIEW_ROWS + warm_up(max(LEVELS))


def known(name: str, values: np.ndarray) -> np.ndarray:
    """``values`` of step field ``name`` with its "not known" zeros as NaN (ZERO_UNKNOWN), so none is plotted."""
    return np.where(values > 0, values, np.nan) if name in ZERO_UNKNOWN else values


def scalar_ring(capacity: int, step: np.ndarray, values: np.ndarray) -> Ring:
    """A (step, value) ring of a scalar holding the newest rows that fit."""
    ring = Ring(min(capacity, SCALAR_CAPACITY), 2)
    keep = ring.capacity  # only the newest rows survive: copy no more than those
    ring.append_many(np.stack([step[-keep:], values[-keep:]], axis=1))
    return ring


class HistoryFold:
    """The step columns of one History, folded as a preview (the newest rows) now and in full later.

    ``shown`` is set by the UI once the preview is on screen; ``finish`` (any thread) then builds every row.
    """

    def __init__(self, history, capacity: int, complete: Callable[[], object] | None = None) -> None:
        self.capacity = capacity
        # A tail read (History.steps_left_out): ``complete()`` reads the whole history for ``finish``.
        self._complete = complete
        self._left_out = int(getattr(history, "steps_left_out", 0))
        step = history.column("step", "step")
        names = list(STEP_FIELDS) + [c for c in history.step_columns() if c.startswith("components.")]
        columns = {"step": step, "loss": history.column("step", "loss"), "t": history.column("step", "t")}
        columns.update({name: known(name, history.column("step", name)) for name in names})
        keep = latest_attempts(step)
        if keep is not None:
            columns = {name: values[keep] for name, values in columns.items()}
        self._columns = columns
        #: Step rows after dropping superseded attempts.
        self.rows = len(columns["step"])
        #: Set by the UI thread once the preview is painted (the worker waits for it before ``finish``).
        self.shown = threading.Event()
        #: The full fold once ``finish`` ran (None before).
        self.result: StepRings | None = None

    @property
    def deferred(self) -> bool:
        """True when the preview leaves rows out (more than ``PREVIEW_ROWS``, or a tail read): ``finish`` has
        work to do."""
        return self.rows > PREVIEW_ROWS or self._left_out > 0

    def column(self, name: str) -> np.ndarray:
        """Every kept row of a column: "step", "loss", "t", a StepLogged field or ``components.<name>``."""
        values = self._columns.get(name)
        return np.full(self.rows, np.nan) if values is None else values

    def preview(self, names: list[str]) -> StepRings:
        """The newest ``PREVIEW_ROWS`` rows (every row when that is all), EMAs exact to float rounding."""
        return self._fold(names, max(0, self.rows - PREVIEW_ROWS))

    def finish(self, names: list[str] | None = None) -> StepRings:
        """Every row (``names``: the scalars to keep, default every column); kept as ``result`` too.

        For a tail read the whole history is read first (``complete``): the slow part of a first open.
        """
        if self._complete is not None:
            self.result = HistoryFold(self._complete(), self.capacity).finish(names)
            return self.result
        if names is None:
            names = [n for n in self._columns if n not in ("step", "loss", "t")]
        self.result = self._fold(names, 0)
        return self.result

    def _fold(self, names: list[str], start: int) -> StepRings:
        step, loss = self.column("step"), self.column("loss")
        rows = np.empty((self.rows - start, 2 + len(LEVELS) - 1), order="F")  # column writes, a contiguous .T
        rows[:, STEP], rows[:, LOSS] = step[start:], loss[start:]
        states = []
        finite = np.isfinite(loss) if start or self._left_out else None
        for column, level in enumerate(LEVELS[1:], start=2):
            begin, state = self._warm_start(finite, start, level)
            state.count += self._left_out  # steps a tail read left out (debiasing only: a**count is 0 by then)
            rows[:, column] = ema_extend(loss[begin:], level, state)[start - begin:]
            states.append(state)
        steps = Ring(self.capacity, rows.shape[1])
        steps.append_many(rows)
        scalars = {}
        for name in names:
            values = self.column(name)
            if np.isfinite(values).any():  # never logged (a NaN grad norm of a run that does not measure it): none
                scalars[name.rpartition(".")[2]] = scalar_ring(self.capacity, step[start:], values[start:])
        return StepRings(steps, states, scalars)

    @staticmethod
    def _warm_start(finite: np.ndarray | None, start: int, level: float) -> tuple[int, EmaState]:
        """Where the EMA of rows from ``start`` begins (``warm_up`` finite points earlier) and its state there."""
        if finite is None:
            return 0, EmaState()
        positions = np.flatnonzero(finite)
        before = int(np.searchsorted(positions, start))  # finite points before the tail
        skipped = max(0, before - warm_up(level))
        begin = int(positions[skipped]) if skipped < len(positions) else start
        # The mean restarts at 0 with every skipped point counted: the debiasing 1 - a**count is the full fold's.
        return min(begin, start), EmaState(0.0, skipped)


def deferred_fold(history, capacity: int) -> HistoryFold | None:
    """The fold of a History too long to fold before the first frame (None otherwise: a list, a short run);
    for a tail read (``History.steps_left_out``) its ``finish`` reads the whole history first."""
    if not (hasattr(history, "column") and hasattr(history, "step_columns")):
        return None
    if getattr(history, "steps_left_out", 0):
        from engine.run.history import read_rest

        return HistoryFold(history, capacity, complete=partial(read_rest, history))
    if len(history.column("step", "step")) <= PREVIEW_ROWS:
        return None
    fold = HistoryFold(history, capacity)
    return fold if fold.deferred else None
