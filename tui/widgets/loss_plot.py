"""Training loss: raw (min/max per column) and EMA-smoothed, val loss at evals, setting-change markers.

``h`` switches between the most recent ~1000 steps and the full history
(both reduced to two points per column before the canvas sees them, so a frame
costs the same at 1k or 1M steps); ``s`` cycles the smoothing weight;
``l`` toggles a log y-axis.
"""

from __future__ import annotations

import numpy as np
from textual.markup import escape

from tui.ema import LEVELS
from tui.history import mean_columns, minmax_columns
from tui.plot_blocks import BlockReducer
from tui.widgets.chart import Chart, step_ticks

#: Steps shown by the "recent" window.
RECENT_STEPS = 1000
#: Marker lines drawn at most (the newest), so a run with hundreds of changes stays legible.
MAX_MARKERS = 12


class LossPlot(Chart):
    """Train loss (raw envelope + EMA), val loss dots and vertical lines where a setting changed."""

    area = "loss"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        #: Log-scaled y axis.
        self.log_y = False
        #: Index into ema.LEVELS (0 = no smoothing).
        self.smoothing = 3
        #: "recent" (last RECENT_STEPS) or "full".
        self.window = "recent"
        # The full-history view reads cached blocks (tui.plot_blocks): a 1M-step frame costs what a 1k one does.
        self._raw_blocks = BlockReducer("minmax")
        self._ema_blocks = BlockReducer("mean")

    def options_key(self) -> tuple:
        return (self.log_y, self.smoothing, self.window)

    def toggle_log_y(self) -> None:
        """Flip the log-y axis."""
        self.log_y = not self.log_y
        self.invalidate()

    def cycle_smoothing(self) -> float:
        """Next smoothing weight (wraps to none); returns it."""
        self.smoothing = (self.smoothing + 1) % len(LEVELS)
        self.invalidate()
        return LEVELS[self.smoothing]

    def toggle_window(self) -> str:
        """Recent ↔ full history; returns the new window."""
        self.window = "full" if self.window == "recent" else "recent"
        self.invalidate()
        return self.window

    def describe(self, model) -> str:
        smooth = LEVELS[self.smoothing]
        parts = ["[b]loss[/b]", f"[$primary]EMA {smooth:g}[/]" if smooth else "raw",
                 f"last {RECENT_STEPS}" if self.window == "recent" else "full history"]
        if self.log_y:
            parts.append("log-y")
        if model.evals:
            parts.append("[$warning]●[/] val")
        if model.markers:
            m = model.markers[-1]
            parts.append(escape(f"│ {m.name} {m.old}→{m.new} @{m.step}"))  # values come from the engine
        return " · ".join(parts)  # no step counter here: the title would then repaint every frame

    def series(self, model, columns: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """What one frame plots, already reduced to the plot's width (also used by the benchmark)."""
        last = RECENT_STEPS if self.window == "recent" else None
        ring = model.steps
        out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if len(ring) and last is None:
            out["raw"] = self._raw_blocks.reduce(ring, 1, 0, columns)
            if self.smoothing:
                out["ema"] = self._ema_blocks.reduce(ring, 1 + self.smoothing, 0, columns)
        elif len(ring):
            x = ring.column(0, last)
            out["raw"] = minmax_columns(x, ring.column(1, last), columns)
            if self.smoothing:
                out["ema"] = mean_columns(x, ring.column(1 + self.smoothing, last), columns)
        if len(ring):
            lo, hi = self.extent(model)
            vx, vy = model.val_loss_series()
            keep = (vx >= lo) & (vx <= hi) & np.isfinite(vy)
            out["val"] = (vx[keep], vy[keep])
        return out

    def extent(self, model) -> tuple[float, float]:
        """First and last step of the window shown (the reduced points need not include either)."""
        ring = model.steps
        shown = min(len(ring), RECENT_STEPS) if self.window == "recent" else len(ring)
        return float(ring.rows_between(0, len(ring) - shown, len(ring) - shown + 1)[0]), float(ring.last()[0])

    def placeholder(self, model) -> str | None:
        if not len(model.steps) or not np.isfinite(model.steps.column(1, RECENT_STEPS)).any():
            return "waiting for the first step…"
        if self.log_y and not (model.steps.column(1) > 0).any():
            return "log-y: no positive loss to show (l turns it off)"
        return None

    def draw(self, plot, model, width: int, height: int) -> None:
        data = self.series(model, max(8, width - 8))  # ~8 columns go to the y tick labels
        if self.log_y:
            data = {k: _positive(*v) for k, v in data.items()}
            plot.yscale("log")
        raw_x, raw_y = data["raw"]
        plot.plot(raw_x.tolist(), raw_y.tolist(), marker="braille", color=self.color("raw" if self.smoothing else "ema"))
        if "ema" in data and len(data["ema"][0]):
            plot.plot(data["ema"][0].tolist(), data["ema"][1].tolist(), marker="braille", color=self.color("ema"))
        vx, vy = data.get("val", ((), ()))
        if len(vx):
            plot.scatter(list(vx), list(vy), marker="●", color=self.color("val"))
        lo, hi = self.extent(model)
        for marker in [m for m in model.markers if lo <= m.step <= hi][-MAX_MARKERS:]:
            plot.vertical_line(marker.step, color=self.color("marker"))
        if hi > lo:
            plot.xlim(float(lo), float(hi))
            step_ticks(plot, float(lo), float(hi))


def _positive(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    keep = y > 0
    return x[keep], y[keep]
