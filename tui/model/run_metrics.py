"""Every scalar series a run logged, by name, read from its history: what `plot` draws and `runs` summarises.

A run's numbers live in two kinds of events: step events (the training loss,
lr, grad norm, throughput, and the task's loss components) and eval events
(every validation metric by name, val_loss included); an autotune search adds one
more, ``autotune_rate``: the rate each candidate measured. Here each becomes a
``Series(name, kind, steps, values)``: step series come straight from the
history's columns (no event objects, so a 1M-step run costs a few array
copies); eval series from the few eval events. Names are what users type
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


def eval_values(event: ev.EvalDone) -> dict[str, float]:
    """Every numeric validation metric of one eval event (val_loss always)."""
    out = {k: float(v) for k, v in (event.metrics or {}).items()
           if isinstance(v, (int, float)) and not isinstance(v, bool)}
    out.setdefault("val_loss", float(event.val_loss))
    return out


def series(history) -> dict[str, Series]:
    """name → Series for every scalar the run logged (an engine.run.history.store.History or a list of events)."""
    out: dict[str, Series] = {}
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
    if len(steps):
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
