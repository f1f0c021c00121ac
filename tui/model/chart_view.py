"""What a chart shows: which steps (the viewport: recent, full, zoomed, panned) and, per pixel column, the exact
envelope and the smoothed line of a series.

**Which steps.** A chart opens on the newest ``RECENT_STEPS`` steps (``h``: the whole history) and follows a
live run. ``zoom`` halves or doubles the span, down to ``MIN_SPAN`` steps (every step its own pixel columns)
and up to the whole run; ``pan`` moves by a quarter of the span; ``reset`` goes back. A view that shows the
newest step keeps following it (zoom keeps its right edge there); panned back into the past it stays where
it was put while the run grows, until panned forward to the newest step again. ``to_edge`` jumps to the
run's first or newest steps, keeping the span.

**The envelope** of a pixel column is the record's (engine.run.steps.envelope): exactly the min, max and last
value of the column's steps, NaN and ±inf included, read from a few pyramid blocks whatever the zoom.

**The smoothed line** (``smoothed``): the EMA the ``s`` key picks (tui.model.ema), per pixel column the mean of
the EMA over the column's steps. While the window holds at most ``RAW_SMOOTH`` values it is computed from
them, after ``warm_up`` values before the window (a debiased EMA forgets geometrically: from there on the
values equal a pass over the whole history, to float64 rounding). Past that, a column spans so many steps
(≥ ``RAW_SMOOTH`` / columns, hundreds, against the EMA's memory of 1 / (1 - a) ≤ 100) that the EMA's column
mean is the column's mean to within that memory's lag, and the pyramid gives the mean exactly: the sum and
count of finite values per block. So a frame costs the same at 1k or 100M steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine.run.steps import Envelope
from tui.model.ema import EmaState, ema_extend

#: Steps shown by the "recent" window.
RECENT_STEPS = 1000
#: The narrowest zoom, in steps.
MIN_SPAN = 8
#: Values of a window smoothed from raw values (above it: the pyramid's column means).
RAW_SMOOTH = 1 << 16
#: Weight below which an old point no longer moves an EMA in float64.
FORGET = 1e-17


def warm_up(a: float) -> int:
    """Finite points an EMA of weight ``a`` needs before a value no longer depends on what came earlier."""
    return 0 if a <= 0.0 else math.ceil(math.log(FORGET) / math.log(a))


@dataclass
class Viewport:
    """The steps a chart shows (module docstring). ``window``: "recent" or "full", what ``reset`` returns to;
    ``span``: the zoomed width in steps (None: the window's own); ``right``: the right edge when panned into
    the past (None: follows the newest step)."""

    window: str = "recent"
    span: int | None = None
    right: int | None = None

    @property
    def zoomed(self) -> bool:
        """True when zoomed or panned away from the window's own view."""
        return self.span is not None or self.right is not None

    def bounds(self, first: int, last: int) -> tuple[int, int]:
        """[lo, hi] shown of a series from step ``first`` to ``last``."""
        total = last - first + 1
        span = self.span if self.span is not None else RECENT_STEPS if self.window == "recent" else total
        span = max(1, min(span, total))
        hi = last if self.right is None else max(first, min(self.right, last))
        lo = max(first, hi - span + 1)
        return lo, max(hi, min(last, lo + span - 1))

    def zoom(self, factor: float, first: int, last: int) -> None:
        """Span × ``factor`` (½ zooms in), within [MIN_SPAN, the whole run]; a following view keeps following,
        another keeps its centre."""
        lo, hi = self.bounds(first, last)
        total = last - first + 1
        span = int(min(total, max(MIN_SPAN, round((hi - lo + 1) * factor))))
        if self.right is not None:
            self.right = min(last, max(first + span - 1, round((lo + hi) / 2 + span / 2)))
            if self.right >= last:
                self.right = None
        self.span = None if span >= total and self.right is None and self.window == "full" else span

    def pan(self, fraction: float, first: int, last: int) -> None:
        """Move by ``fraction`` of the span (negative: back in time), at least one step; reaching the newest step
        follows it again."""
        lo, hi = self.bounds(first, last)
        span = hi - lo + 1
        shift = round(span * fraction) or (1 if fraction > 0 else -1)
        right = max(first + span - 1, hi + shift)
        self.span = span
        self.right = None if right >= last else right

    def to_edge(self, start: bool, first: int, last: int) -> None:
        """Keep the span, show the run's first steps (``start``) or its newest ones (following them)."""
        lo, hi = self.bounds(first, last)
        self.span = hi - lo + 1
        self.right = min(last, first + self.span - 1) if start else None
        if self.right is not None and self.right >= last:
            self.right = None

    def reset(self) -> None:
        """Back to the window's own view, following the newest step."""
        self.span = self.right = None


def smoothed(series, name: str, lo: int, hi: int, columns: int, envelope: Envelope, level: float) -> np.ndarray:
    """Per pixel column of [lo, hi], the smoothed line (module docstring; NaN where a column has no finite value).

    ``series`` reads values by name (tui.model.step_series.StepSeries), ``envelope`` is the column envelope of
    the same window and columns.
    """
    if level <= 0.0 or int(envelope.count.sum()) > RAW_SMOOTH:
        return envelope.mean
    steps, values = series.window(name, lo, hi)
    need = warm_up(level)
    prior, start = np.zeros(0), 0
    if need and len(values):
        want = need
        while True:  # enough finite values before the window, or the series' start
            _, prior, start = series.before(name, lo, want)
            if start == 0 or int(np.isfinite(prior).sum()) >= need or want >= RAW_SMOOTH:
                break
            want *= 2
    # Values before the ones read count for the debiasing only (1 - a**count, exactly 1.0 by then).
    ema = ema_extend(np.concatenate([prior, values]), level, EmaState(0.0, start))[len(prior):]
    return column_means(steps, ema, envelope.x, hi)


def column_means(steps: np.ndarray, values: np.ndarray, x: np.ndarray, hi: int) -> np.ndarray:
    """Mean of the finite ``values`` per column (columns start at ``x``; the last ends at ``hi``)."""
    out = np.full(len(x), np.nan)
    if not len(steps):
        return out
    edges = np.append(x, hi + 1)
    bounds = np.searchsorted(steps, edges, "left")
    a, b = bounds[:-1], bounds[1:]
    used = np.flatnonzero(b > a)
    if not len(used):
        return out
    ok = np.isfinite(values)
    base = int(a[used[0]])
    first = a[used] - base
    part = slice(base, int(b[used[-1]]))
    total = np.add.reduceat(np.where(ok, values, 0.0)[part], first)
    count = np.add.reduceat(ok[part].astype(np.int64), first)
    with np.errstate(invalid="ignore", divide="ignore"):
        out[used] = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return out
