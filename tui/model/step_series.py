"""The per-step history the charts draw: the loss ring with its EMAs, one ring per other scalar.

Steps arrive in batches (a live poll, or a whole history's columns); each
batch is appended in one numpy call per ring. A resumed run redoes steps from
its checkpoint, so a batch that starts at or before a stored step first drops
the stored ones from there (``latest_attempts`` does the same inside a batch)
and the EMAs are recomputed from the kept raw losses. A long history goes in
as a preview of its newest rows first (tui.model.history_fold), and ``adopt``
swaps in every row once another thread folded them.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from engine.core.taskspec import Capabilities
from engine.run import events as ev
from tui.model.ema import LEVELS, EmaState, ema_extend
from tui.model.history import Ring
from tui.model.history_fold import LOSS, STEP, STEP_FIELDS, HistoryFold, StepRings, known, latest_attempts, scalar_ring


def number(value: Any) -> float:
    """A logged number as a float; NaN for None or anything else."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else np.nan


def step_columns(steps: list[ev.StepLogged], components: Iterable[str]) -> tuple[np.ndarray, np.ndarray, dict]:
    """(step, loss, {scalar: values}) of a batch of step events: the StepLogged fields and ``components``."""
    count = len(steps)
    loss = np.fromiter((s.loss for s in steps), dtype=np.float64, count=count)
    step = np.fromiter((s.step for s in steps), dtype=np.float64, count=count)
    extra = {name: np.fromiter((number(getattr(s, name, None)) for s in steps), dtype=np.float64, count=count)
             for name in STEP_FIELDS}
    for key in components:
        extra[key] = np.fromiter((number((s.components or {}).get(key)) for s in steps), dtype=np.float64,
                                 count=count)
    return step, loss, extra


class StepSeries:
    """The step ring (step, raw loss, one EMA per smoothing level), the EMAs' running states and the scalar rings.

    ``steps`` and ``scalars`` are replaced (not mutated) when a preview is adopted: readers take them fresh.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.steps = Ring(capacity, 2 + len(LEVELS) - 1)
        self.ema = [EmaState() for _ in LEVELS[1:]]
        #: Per-step scalars besides the loss, by name: rings of (step, value).
        self.scalars: dict[str, Ring] = {}
        self._pending: HistoryFold | None = None  # a long history's steps still being folded (preview shown)
        self._preview_key: tuple | None = None

    @property
    def empty(self) -> bool:
        """True before any step (or scalar) was stored."""
        return not len(self.steps) and not self.scalars

    @property
    def loading(self) -> bool:
        """True while only the newest steps of a long history are in the rings (the rest is being folded)."""
        return self._pending is not None

    def names(self) -> list[str]:
        """Per-step scalars stored: loss first, then its components, grad norm, LR, throughput."""
        return (["loss"] if len(self.steps) else []) + list(self.scalars)

    def series(self, name: str, last: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of a per-step scalar (the raw loss for "loss"); the newest ``last`` when given."""
        if name == "loss":
            return self.steps.column(STEP, last), self.steps.column(LOSS, last)
        ring = self.scalars.get(name)
        if ring is None:
            return np.empty(0), np.empty(0)
        return ring.column(0, last), ring.column(1, last)

    def component_names(self, capabilities: Capabilities, *samples: ev.StepLogged) -> list[str]:
        """Loss components to store: those the task declares, those already stored, those these steps carry."""
        names = [m.name for m in capabilities.curves if m.kind == "train" and m.name not in STEP_FIELDS]
        names += [k for k in self.scalars if k not in STEP_FIELDS]
        for sample in samples:
            names += [k for k, v in (sample.components or {}).items() if isinstance(v, (int, float))]
        return [k for k in dict.fromkeys(names) if k != "loss"]

    def append(self, step: np.ndarray, loss: np.ndarray, extra: dict[str, np.ndarray] | None = None) -> None:
        """Append a batch of steps (``extra``: other scalars by name, NaN where a step did not log one)."""
        keep = latest_attempts(step)
        if keep is not None:
            step, loss = step[keep], loss[keep]
            extra = {k: v[keep] for k, v in (extra or {}).items()}
        rewound = self._rewind_to(float(step[0])) if len(step) else False
        for name, values in (extra or {}).items():
            values = known(name, values)
            if name not in self.scalars:
                if np.isfinite(values).any():  # else never logged (a NaN grad norm of a run that does not measure it)
                    self.scalars[name] = scalar_ring(self.capacity, step, values)
                continue
            keep = self.scalars[name].capacity  # only the newest rows survive: copy no more than those
            self.scalars[name].append_many(np.stack([step[-keep:], values[-keep:]], axis=1))
        self.steps.append_many(self._rows(step, loss))
        if rewound:
            self._resmooth()

    def preview(self, fold: HistoryFold, names: list[str]) -> HistoryFold | None:
        """Into an empty series: the newest rows of ``fold`` now; returns ``fold`` when rows are left to ``adopt``."""
        self._install(fold.preview(names))
        if not fold.deferred:
            return None
        self._pending = fold
        self._preview_key = self._key()
        return fold

    def adopt(self, fold: HistoryFold, rings: StepRings | None = None) -> bool:
        """Swap in every row of ``fold`` (``rings``: ``fold.finish()``'s result); False when it is not the
        pending fold or steps arrived since the preview (the preview then stays: it is exact)."""
        if fold is not self._pending:
            return False
        self._pending = None
        rings = rings or fold.result
        if rings is None or self._preview_key != self._key():
            return False
        self.steps, self.ema = rings.steps, rings.ema
        # In the stored order; a component only the left-out steps of a tail read carried comes last.
        self.scalars = {**{name: rings.scalars.get(name, ring) for name, ring in self.scalars.items()},
                        **{name: ring for name, ring in rings.scalars.items() if name not in self.scalars}}
        return True

    def _key(self) -> tuple:
        """What identifies the step ring's content: any append or swap since changes it."""
        return id(self.steps), self.steps.total, self.steps.generation

    def _install(self, rings: StepRings) -> None:
        self.steps, self.ema = rings.steps, rings.ema
        self.scalars.update(rings.scalars)

    def _rows(self, step: np.ndarray, loss: np.ndarray) -> np.ndarray:
        """Step-ring rows of raw losses, their EMAs continued from the running states."""
        rows = np.empty((len(step), self.steps.width))
        rows[:, STEP], rows[:, LOSS] = step, loss
        for column, (level, state) in enumerate(zip(LEVELS[1:], self.ema), start=2):
            rows[:, column] = ema_extend(loss, level, state)
        return rows

    def _rewind_to(self, first_new_step: float) -> bool:
        """Drop stored steps at or after ``first_new_step``: a resumed run redoes them from its checkpoint."""
        for ring in self.scalars.values():
            steps = ring.column(0)
            if len(steps) and steps[-1] >= first_new_step:
                ring.drop_newest(len(steps) - int(np.searchsorted(steps, first_new_step, side="left")))
        stored = self.steps.column(STEP)
        if not len(stored) or stored[-1] < first_new_step:
            return False
        self.steps.drop_newest(len(stored) - int(np.searchsorted(stored, first_new_step, side="left")))
        return True

    def _resmooth(self) -> None:
        """Recompute every EMA column from the kept raw losses (after a rewind the running state is stale)."""
        loss = self.steps.column(LOSS).copy()
        step = self.steps.column(STEP).copy()
        self.ema = [EmaState() for _ in LEVELS[1:]]
        rows = self._rows(step, loss)
        self.steps.drop_newest(len(loss))
        self.steps.append_many(rows)
