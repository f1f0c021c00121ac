"""Every scalar series a run logged, by name, read from its history: what `plot` draws and `runs` summarises.

A run's numbers live in two places: its step record (the training loss, lr,
grad norm, throughput, the task's loss components and any other per-step name,
engine.run.steps) and its eval events (every validation metric by name,
val_loss included); an autotune search adds one more, ``autotune_rate``: the
rate each candidate measured. Here each becomes a ``Series`` whose
``points(columns)`` are what a chart of that many columns draws: for a per-step
series the exact min and max of each column, read from the record's pyramid
(kilobytes whatever the run's length; a run read without a record, from its
log's step columns, gets the same by one pass); eval series from the few eval
events. Names are what users type
after ``--metric``: a field (``loss``, ``grad_norm``), a component (``mse``)
or a validation metric (``val_loss`` or any name the task reports). Schema-1
eval events arrive here already migrated (engine.core.migrate, through the history).

The run's primary metric comes from ``RunStarted.capabilities`` (the task
declares it); a run without capabilities falls back to val_loss, then loss.
Torch-free, textual-free.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.run import events as ev
from tui.model.step_series import StepSeries
from tui.model.step_source import reduce_columns

#: Step fields worth plotting, in the order they are listed.
STEP_SERIES = ("loss", "lr", "grad_norm", "samples_per_s", "steps_per_s")
#: The series of autotune candidates' measured rates (samples/s, or tokens/s for a task that counts tokens).
AUTOTUNE_RATE = "autotune_rate"


@dataclass(frozen=True)
class Series:
    """One metric over a run: ``kind`` "train" (per step), "val" (per eval) or "autotune" (per candidate), x = step."""

    name: str
    kind: str
    steps: np.ndarray
    values: np.ndarray

    def points(self, columns: int) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) to draw at ``columns`` columns: a per-step series' min and max per column (non-finite values
        left out), the others as they are."""
        if self.kind != "train" or len(self.steps) <= 2 * columns:
            keep = np.isfinite(self.values)
            return self.steps[keep], self.values[keep]
        return _extremes(reduce_columns(self.steps, self.values, int(self.steps[0]), int(self.steps[-1]), columns))


@dataclass(frozen=True)
class RecordSeries:
    """A per-step metric in a run's step record (``source``: tui.model.step_source.RecordSteps, ``raw`` its name
    there), drawn from its envelope."""

    name: str
    source: object
    raw: str
    kind: str = "train"

    def points(self, columns: int) -> tuple[np.ndarray, np.ndarray]:
        span = self.source.bounds(self.raw)
        if span is None:
            return np.zeros(0), np.zeros(0)
        return _extremes(self.source.envelope(self.raw, span[0], span[1], columns))


def _extremes(env) -> tuple[np.ndarray, np.ndarray]:
    """Each column's finite min and max at its middle step, in order (±inf and NaN cannot be drawn by plotext)."""
    step = env.x[-1] - env.x[-2] if len(env.x) > 1 else 1
    width = np.diff(env.x, append=env.x[-1] + step) if len(env.x) else env.x
    middle = env.x + np.maximum(width - 1, 0) / 2
    low = np.where(np.isfinite(env.min), env.min, np.nan)
    high = np.where(np.isfinite(env.max), env.max, np.nan)
    x = np.repeat(middle, 2)
    y = np.stack([low, high], 1).ravel()
    keep = np.isfinite(y)
    return x[keep].astype(np.float64), y[keep]


def eval_values(event: ev.EvalDone) -> dict[str, float]:
    """Every numeric validation metric of one eval event (val_loss always)."""
    out = {k: float(v) for k, v in (event.metrics or {}).items()
           if isinstance(v, (int, float)) and not isinstance(v, bool)}
    out.setdefault("val_loss", float(event.val_loss))
    return out


def series(history, source=None) -> dict[str, Series | RecordSeries]:
    """name → Series for every scalar the run logged (an engine.run.history.store.History or a list of events;
    ``source``: the run's step record, tui.model.step_source.RecordSteps, whose series come first)."""
    out: dict[str, Series | RecordSeries] = {}
    if source is not None:
        named = StepSeries()
        named.use(source)
        out.update({name: RecordSeries(name, source, raw) for name, raw in named.chart_names().items()})
    if hasattr(history, "column"):
        steps = history.column("step", "step")
        columns = history.step_columns() if hasattr(history, "step_columns") else list(STEP_SERIES)
        others = history.others("step")
    else:
        events = list(history)
        step_events = [e for e in events if isinstance(e, ev.StepLogged)]
        steps = np.array([e.step for e in step_events], np.float64)
        names = {f"components.{k}" for e in step_events for k in e.components}
        columns = list(STEP_SERIES) + sorted(names)
        others = [e for e in events if not isinstance(e, ev.StepLogged)]
    if len(steps) and source is None:
        for column in columns:
            name = column.removeprefix("components.")
            if column not in STEP_SERIES and not column.startswith("components."):
                continue
            if column.startswith("components.") and name in STEP_SERIES:
                name = column  # a component named like a field keeps its prefix
            values = (history.column("step", column) if hasattr(history, "column")
                      else np.array([_value(e, column) for e in step_events], np.float64))
            if np.isfinite(values).any():
                out[name] = Series(name, "train", steps, values)
    evals = [e for e in others if isinstance(e, ev.EvalDone)]
    gathered: dict[str, list[tuple[int, float]]] = {}
    for event in evals:
        for name, value in eval_values(event).items():
            gathered.setdefault(name, []).append((event.step, value))
    for name, points in gathered.items():
        x, y = np.array(points, np.float64).reshape(-1, 2).T
        if np.isfinite(y).any():
            out[name if name not in out else f"val_{name}"] = Series(name, "val", x, y)
    tried = [(e.step, e.rate) for e in others if isinstance(e, ev.AutotuneCandidate) and e.steps]
    if tried:  # each candidate an autotune search measured: its rate at the step its window ended
        x, y = np.array(tried, np.float64).T
        out[AUTOTUNE_RATE] = Series(AUTOTUNE_RATE, "autotune", x, y)
    return out


def _value(event: ev.StepLogged, column: str) -> float:
    if column.startswith("components."):
        value = event.components.get(column.split(".", 1)[1])
    else:
        value = getattr(event, column, None)
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def primary(history, available: dict[str, Series] | None = None) -> str | None:
    """The run's primary metric: the task's declared one, else val_loss, else loss (None: nothing logged)."""
    available = series(history) if available is None else available
    events = history.others("step") if hasattr(history, "others") else list(history)
    started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
    declared = ((started.capabilities or {}).get("primary") or {}).get("name") if started else None
    for name in (declared, "val_loss", "loss"):
        if name and name in available:
            return name
    return next(iter(available), None)
