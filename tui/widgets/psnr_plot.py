"""Validation PSNR per eval, the best one marked, and the abort threshold (best − train.abort_drop_db).

The engine's abort policy stops a run whose PSNR sits below that line for
``abort_patience`` evals in a row; drawing it shows how close a run is.
"""

from __future__ import annotations

import numpy as np

from tui.widgets.chart import Chart, step_ticks


class PsnrPlot(Chart):
    """Val PSNR (dB) against step, best marked, abort threshold as a horizontal line."""

    area = "psnr"

    def describe(self, model) -> str:
        parts = ["[b]PSNR[/b] dB"]
        best = model.best_psnr()
        threshold = model.abort_threshold()
        if best is not None:
            parts.append(f"[$success]★{best[1]:.2f}[/] @{best[0]}")
        if threshold is not None:
            parts.append(f"[$error]abort <{threshold:.2f}[/]")
        return " · ".join(parts)

    def placeholder(self, model) -> str | None:
        ys = model.psnr_series()[1]
        return None if np.isfinite(ys).any() else "no eval with PSNR yet"

    def draw(self, plot, model, width: int, height: int) -> None:
        xs, ys = model.psnr_series()
        keep = np.isfinite(ys)
        xs, ys = xs[keep], ys[keep]
        plot.plot(xs.tolist(), ys.tolist(), marker="braille", color=self.color("line"))
        plot.scatter(xs.tolist(), ys.tolist(), marker="•", color=self.color("line"))
        best = model.best_psnr()
        if best is not None:
            plot.scatter([best[0]], [best[1]], marker="★", color=self.color("best"))
        threshold = model.abort_threshold()
        low, high = float(ys.min()), float(ys.max())
        if threshold is not None:
            plot.horizontal_line(threshold, color=self.color("threshold"))
            low = min(low, threshold)
        pad = max(0.25, 0.08 * (high - low))
        plot.ylim(low - pad, high + pad)
        if xs[-1] > xs[0]:
            plot.xlim(float(xs[0]), float(xs[-1]))
            step_ticks(plot, float(xs[0]), float(xs[-1]), count=4)
