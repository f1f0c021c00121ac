"""A run's primary metric as a sparkline for `sensorlm-tui runs`, without decoding its log.

`runs` must list a run with a million steps as fast as a new one, so the
trend is sampled, never read whole:

- a validation metric (the usual primary): evals are near-uniform in bytes
  too, so the first eval line in each of ``POINTS`` equal byte segments of
  the memory-mapped log is found with ``bytes.find`` (each search stops at
  its segment's end: a scan of a few MB, the whole log only when it has no
  evals) and decoded, plus the newest;
- a training metric (loss, a loss component; the fallback of a run without
  evals): from the run's step record, the mean of each of ``POINTS`` equal
  spans of steps (a few pyramid blocks each, engine.run.steps); only a run
  without a record (older than it: every step a line) has the first step line
  after each of ``POINTS`` evenly spaced byte offsets decoded (steps are
  near-uniform in bytes), as a run with one logs step lines only at a cadence.
  Either way the cost is constant whatever the run's length.

The metric is the task's declared primary (``RunStarted.capabilities``),
else val_loss, else loss. Torch-free, textual-free.
"""

from __future__ import annotations

import math
import mmap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.run import events as ev
from engine.run.history import parse_line
from tui.model.log_tail import first_event
from tui.model.run_metrics import eval_values

#: Points in a sparkline.
POINTS = 16
_BARS = "▁▂▃▄▅▆▇█"
_EVAL = b'{"type":"eval",'
_STEP = b'{"type":"step",'


@dataclass(frozen=True)
class Trend:
    """A metric's sampled values over a run, oldest first."""

    metric: str
    values: tuple[float, ...]

    def spark(self) -> str:
        """The values as eighth-block bars (blank where not finite), scaled to their own min..max."""
        return spark(self.values)


def spark(values) -> str:
    """Eighth-block sparkline of ``values`` (a flat series draws mid-height)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return ""
    low, high = min(finite), max(finite)
    span = high - low
    out = []
    for v in values:
        if not math.isfinite(v):
            out.append(" ")
        elif span == 0:
            out.append(_BARS[3])
        else:
            out.append(_BARS[min(7, int((v - low) / span * 8))])
    return "".join(out)


def _lines_at(mapped, starts: list[int]) -> list[ev.Event]:
    out = []
    for start in starts:
        end = mapped.find(b"\n", start)
        event = parse_line(mapped[start:end]) if end > start else None
        if event is not None:
            out.append(event)
    return out


def _eval_starts(mapped, points: int) -> list[int]:
    """Line starts of up to ``points`` + 1 eval lines: the first in each of ``points`` equal byte segments, and the
    newest. Each search stops at its segment's end, so the whole log is scanned only when it has no evals."""
    size, starts = len(mapped), []
    if mapped[:len(_EVAL)] == _EVAL:
        starts.append(0)
    for k in range(points):
        at = mapped.find(b"\n" + _EVAL, max(size * k // points, starts[-1] if starts else 0), size * (k + 1) // points)
        if at >= 0 and (not starts or at + 1 > starts[-1]):
            starts.append(at + 1)
    last = mapped.rfind(b"\n" + _EVAL, starts[-1] if starts else 0)
    # ``not starts``: the only eval line can straddle a segment boundary, which every segment's search misses.
    if last >= 0 and (not starts or last + 1 > starts[-1]):
        starts.append(last + 1)
    return starts


def _step_starts(mapped, points: int) -> list[int]:
    size, starts = len(mapped), []
    for k in range(points):
        at = mapped.find(b"\n" + _STEP, size * k // points)
        if at >= 0 and (not starts or at + 1 > starts[-1]):
            starts.append(at + 1)
    last = mapped.rfind(b"\n" + _STEP)  # the newest step always ends the line
    if last >= 0 and (not starts or last + 1 > starts[-1]):
        starts.append(last + 1)
    return starts


def _sample(items: list, points: int) -> list:
    if len(items) <= points:
        return items
    return [items[round(i * (len(items) - 1) / (points - 1))] for i in range(points)]


def trend(run: Path, points: int = POINTS) -> Trend | None:
    """The primary metric's trend of the run in ``run`` (None: no log, or nothing logged yet)."""
    path = Path(run) / "events.jsonl"
    started = first_event(path, "run_started")
    declared = ((getattr(started, "capabilities", None) or {}).get("primary") or {}).get("name")
    try:
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            evals = [e for e in _lines_at(mapped, _sample(_eval_starts(mapped, points), points))
                     if isinstance(e, ev.EvalDone)]
            val = [eval_values(e) for e in evals]
            for name in (declared, "val_loss"):
                if name and val and any(name in v for v in val):
                    return Trend(name, tuple(v.get(name, math.nan) for v in val))
            recorded = _record_trend(Path(run), declared, points)
            if recorded is not None:  # the log's step lines (a cadence of them now) are not looked at
                return recorded
            steps = [e for e in _lines_at(mapped, _step_starts(mapped, points))
                     if isinstance(e, ev.StepLogged)]
    except (OSError, ValueError):  # no log, or an empty one (mmap refuses size 0)
        return None
    for name in (declared, "loss"):
        values = [_step_value(e, name) for e in steps] if name else []
        if any(math.isfinite(v) for v in values):
            return Trend(name, tuple(values))  # type: ignore[arg-type]
    return None


def _record_trend(run: Path, declared: str | None, points: int) -> Trend | None:
    """The declared metric's (else the loss's) mean over ``points`` equal spans of steps, from the run's record."""
    from tui.model.step_open import open_steps
    from tui.model.step_source import record_name

    source = open_steps(run)
    if source is None:
        return None
    names = set(source.names())
    for name in (declared, "loss"):
        raw = record_name(name, names) if name else None
        span = source.bounds(raw) if raw else None
        if span is not None:
            means = source.envelope(raw, span[0], span[1], min(points, span[1] - span[0] + 1)).mean
            if np.isfinite(means).any():
                return Trend(name, tuple(float(v) for v in means))
    return None


def _step_value(event: ev.StepLogged, name: str) -> float:
    value = event.components.get(name, getattr(event, name, None))
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
