"""One chart of any scalar the run logs: training envelope + smoothing, validation overlaid, another run behind.

Which scalar is a choice (the metric chooser, ``m``): the loss, a loss
component, grad norm, LR, throughput, or any validation metric. A training
scalar and its validation partner are one picture (val_loss dots over the
loss, whichever of the two is chosen). The task's primary metric comes with
its best value (★, by its declared direction) and the abort guide line
(``policies.abort_drop`` away from the best): the engine's abort policy stops a
run that sits past that line for ``abort_patience`` evals. A metric the task
declares with guides (``Metric.guides``: a baseline scored on the same
validation set) gets a dotted line at each guide's latest value, labelled in
the title, so the curve is always read against its floor. A compare run
(``attach --compare``, the run picker) is drawn behind, aligned by step.

``h`` switches between the most recent ~1000 steps and the full history
(the loss reads cached min/max blocks, tui.model.plot_blocks, so a 1M-step frame
costs what a 1k one does); ``s`` cycles the smoothing weight; ``l`` toggles
a log y-axis.
"""

from __future__ import annotations

import numpy as np
from textual.markup import escape

from tui.model.ema import LEVELS
from tui.model.format import change_text, short_float, short_label
from tui.model.history import mean_columns, minmax_columns
from tui.model.plot_blocks import BlockReducer
from tui.widgets.chart import Chart, step_ticks
from tui.widgets.fit import Part, fit

#: Steps shown by the "recent" window.
RECENT_STEPS = 1000
#: Marker lines drawn at most (the newest), so a run with hundreds of changes stays legible.
MAX_MARKERS = 12
#: Chart height (rows) from which a title that does not fit one row takes two (a legend of guides wraps).
TWO_ROW_TITLE_FROM = 10


class MetricChart(Chart):
    """A chart of ``metric`` (None: the task's primary metric) with its partner, best, guide line and compare run."""

    area = "charts"

    def __init__(self, metric: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        #: The chosen scalar's name; None follows the task's primary metric.
        self.metric = metric
        #: Log-scaled y axis.
        self.log_y = False
        #: Index into ema.LEVELS (0 = no smoothing).
        self.smoothing = 3
        #: "recent" (last RECENT_STEPS) or "full".
        self.window = "recent"
        self._raw_blocks = BlockReducer("minmax")
        self._ema_blocks = BlockReducer("mean")

    # ---------------------------------------------------------------- options
    def options_key(self) -> tuple:
        return (self.metric, self.log_y, self.smoothing, self.window)

    def shown(self, model) -> str:
        """The name of the scalar this chart draws now."""
        return self.metric or model.primary.name

    def choose(self, name: str | None) -> None:
        """Draw ``name`` from now on (None: the primary metric)."""
        self.metric = name
        self.invalidate()

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

    # ------------------------------------------------------------------ data
    def series(self, model, columns: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """What one frame plots, already reduced to the plot's width (also used by the benchmark).

        Keys: "raw" (min/max envelope) and "ema" of the training scalar, "val" of its validation partner,
        "cmp" / "cmp_val" of the compare run.
        """
        train, val = model.pair(self.shown(model))
        last = RECENT_STEPS if self.window == "recent" else None
        out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if train == "loss" and len(model.steps):
            ring = model.steps
            if last is None:
                out["raw"] = self._raw_blocks.reduce(ring, 1, 0, columns)
                if self.smoothing:
                    out["ema"] = self._ema_blocks.reduce(ring, 1 + self.smoothing, 0, columns)
            else:
                x = ring.column(0, last)
                out["raw"] = minmax_columns(x, ring.column(1, last), columns)
                if self.smoothing:
                    out["ema"] = mean_columns(x, ring.column(1 + self.smoothing, last), columns)
        elif train is not None:
            x, y = model.train_series(train, last)
            if len(x):
                out["raw"] = minmax_columns(x, y, columns)
                if self.smoothing:  # a column mean: smoothing without a stored EMA per scalar
                    out["ema"] = mean_columns(x, y, max(4, columns // (1 + self.smoothing)))
        if val is not None:
            out["val"] = model.val_series(val)
        lo, hi = self.extent(model)
        compare = getattr(model, "compare", None)
        if compare is not None:
            ctrain, cval = compare.pair(self.shown(model))
            if ctrain is not None:
                x, y = compare.train_series(ctrain)
                keep = (x >= lo) & (x <= hi)
                out["cmp"] = mean_columns(x[keep], y[keep], columns)
            if cval is not None:
                out["cmp_val"] = compare.val_series(cval)
        for key in ("val", "cmp_val"):
            if key in out:
                x, y = out[key]
                keep = (x >= lo) & (x <= hi) & np.isfinite(y)
                out[key] = (x[keep], y[keep])
        return out

    def extent(self, model) -> tuple[float, float]:
        """First and last step of the window shown: the training window widened to the evals inside its span (the
        evaluation before the first step, at step 0, is a point of the chart too), else every eval."""
        train, val = model.pair(self.shown(model))
        xs = np.empty(0)
        if train is not None:
            xs = model.train_series(train, RECENT_STEPS if self.window == "recent" else None)[0]
        vx = model.val_series(val)[0] if val is not None else np.empty(0)
        if not len(xs):
            xs = vx
        if not len(xs):
            return 0.0, 0.0
        lo, hi = float(xs[0]), float(xs[-1])
        inside = vx[vx >= hi - RECENT_STEPS] if self.window == "recent" else vx
        if len(inside):
            lo, hi = min(lo, float(inside.min())), max(hi, float(inside.max()))
        compare = getattr(model, "compare", None)
        if compare is not None and self.window == "full":
            ctrain, cval = compare.pair(self.shown(model))
            cx = compare.train_series(ctrain)[0] if ctrain else compare.val_series(cval)[0] if cval else ()
            if len(cx):
                lo, hi = min(lo, float(cx[0])), max(hi, float(cx[-1]))
        return lo, hi

    # --------------------------------------------------------------- drawing
    def describe(self, model) -> str:
        """The title, fitted to the chart's width (tui.widgets.fit): one row, two on a chart tall enough for a
        legend of guides; labels shorten and the least wanted parts go before a number is cut."""
        parts = self.title_parts(model)
        width = (self.size.width or 0) - 2  # the title row's padding
        if width <= 8:  # not laid out yet: everything, one row
            return " · ".join(p.text for p in parts)
        return "\n".join(fit(parts, width, 2 if (self.size.height or 0) >= TWO_ROW_TITLE_FROM else 1))

    def title_parts(self, model) -> list[Part]:
        """The title's parts, most wanted kept longest: the metric, its best and abort line, the guides' values."""
        name = self.shown(model)
        metric = model.describe(name)
        train, val = model.pair(name)
        unit = f" {escape(metric.unit)}" if metric.unit else ""
        label = metric.label or name
        parts = [Part(f"[b]{escape(label)}[/b]{unit}", f"[b]{escape(short_label(label))}[/b]{unit}", keep=9)]
        if train is not None:
            smooth = LEVELS[self.smoothing]
            parts.append(Part(f"[$primary]EMA {smooth:g}[/]" if smooth else "raw", keep=1))
            loading = " (loading…)" if getattr(model, "history_loading", False) else ""
            parts.append(Part(f"last {RECENT_STEPS}" if self.window == "recent" else f"full history{loading}",
                              "recent" if self.window == "recent" else f"full{loading}", keep=1))
        if self.log_y:
            parts.append(Part("log-y", keep=4))
        if val is not None and train is not None:
            parts.append(Part(f"[$warning]●[/] {escape(val)}", keep=3))
        if val is not None and val == model.primary.name:
            best = model.best_primary()
            threshold = model.abort_threshold()
            if best is not None:
                parts.append(Part(f"[$success]★{short_float(best[1])}[/] @{best[0]}", keep=7))
            if threshold is not None:
                worse = "<" if model.primary.higher_is_better else ">"
                parts.append(Part(f"[$error]abort {worse}{short_float(threshold)}[/]",
                                  f"[$error]✗{worse}{short_float(threshold)}[/]", keep=6))
        if val is not None:
            # Each guide's line carries its label in the plot; its value is here, while there is room.
            parts += [Part(f"[$accent]┄ {escape(label)} {short_float(value)}[/]", keep=4)
                      for label, value in _guides(model, name)]
        compare = getattr(model, "compare", None)
        if compare is not None:
            parts.append(Part(f"[$secondary]┄ {escape(compare.started.name if compare.started else 'compare')}[/]",
                              keep=3))
        if train == "loss" and model.markers:
            m = model.markers[-1]  # values come from the engine: escaped
            parts.append(Part(escape(f"│ {m.name} {change_text(m.old, m.new)} @{m.step}"), keep=2))
        return parts  # no step counter here: the title would then repaint every frame

    def placeholder(self, model) -> str | None:
        name = self.shown(model)
        train, val = model.pair(name)
        has = False
        if train is not None:
            has = bool(np.isfinite(model.train_series(train, RECENT_STEPS)[1]).any())
        if not has and val is not None:
            has = bool(np.isfinite(model.val_series(val)[1]).any())
        if not has:
            if model.starting_up:
                summary = model.model_summary
                return "starting up\n" + "\n".join(model.phase_lines(model.clock())) + (
                    f"\n\n{summary}" if summary else "")
            if train == "loss" or not len(model.steps):
                return "waiting for the first step…"
            return f"no {model.describe(name).label or name} yet"
        if self.log_y and train is not None and not (model.train_series(train)[1] > 0).any():
            return "log-y: no positive value to show (l turns it off)"
        return None

    def draw(self, plot, model, width: int, height: int) -> None:
        data = self.series(model, max(8, width - 8))  # ~8 columns go to the y tick labels
        if self.log_y:
            data = {k: _positive(*v) for k, v in data.items()}
            plot.yscale("log")
        name = self.shown(model)
        train, val = model.pair(name)
        ys = [v[1] for v in data.values() if len(v[1])]
        if "cmp" in data and len(data["cmp"][0]):
            plot.plot(data["cmp"][0].tolist(), data["cmp"][1].tolist(), marker="braille", color=self.color("compare"))
        if "cmp_val" in data and len(data["cmp_val"][0]):
            plot.scatter(data["cmp_val"][0].tolist(), data["cmp_val"][1].tolist(), marker="∘",
                         color=self.color("compare"))
        if "raw" in data:
            raw_x, raw_y = data["raw"]
            plot.plot(raw_x.tolist(), raw_y.tolist(), marker="braille",
                      color=self.color("raw" if self.smoothing else "ema"))
        if "ema" in data and len(data["ema"][0]):
            plot.plot(data["ema"][0].tolist(), data["ema"][1].tolist(), marker="braille", color=self.color("ema"))
        vx, vy = data.get("val", ((), ()))
        if len(vx):
            if train is None:  # validation only: join the dots
                plot.plot(list(vx), list(vy), marker="braille", color=self.color("line"))
            plot.scatter(list(vx), list(vy), marker="●" if train is not None else "•",
                         color=self.color("val" if train is not None else "line"))
        lo, hi = self.extent(model)
        if val is not None and val == model.primary.name and not self.log_y:
            best = model.best_primary()
            if best is not None and lo <= best[0] <= hi:
                plot.scatter([best[0]], [best[1]], marker="★", color=self.color("best"))
            threshold = model.abort_threshold()
            if threshold is not None:
                plot.horizontal_line(threshold, color=self.color("threshold"))
                ys.append(np.array([threshold]))
        if val is not None:
            for label, value in _guides(model, name):
                if value > 0 or not self.log_y:
                    plot.horizontal_line(value, color=self.color("guide"), label=f" {label} ")
                    ys.append(np.array([value]))
        if ys and not self.log_y:
            low = min(float(np.nanmin(y)) for y in ys)
            high = max(float(np.nanmax(y)) for y in ys)
            if train is None:  # sparse validation points: a margin so they are not on the frame
                pad = max(abs(high) * 1e-3, 0.08 * (high - low)) or 0.25
                plot.ylim(low - pad, high + pad)
        if train is not None:
            for marker in [m for m in model.markers if lo <= m.step <= hi][-MAX_MARKERS:]:
                plot.vertical_line(marker.step, color=self.color("marker"))
        if hi > lo:
            plot.xlim(float(lo), float(hi))
            step_ticks(plot, float(lo), float(hi), count=5 if width >= 50 else 4, width=width - 8)


def _guides(model, name: str) -> list[tuple[str, float]]:
    """(label, latest finite value) of each reference line the task declares for metric ``name``."""
    out = []
    for label, reference in model.describe(name).guides:
        values = model.val_series(reference)[1]
        values = values[np.isfinite(values)]
        if len(values):
            out.append((label, float(values[-1])))
    return out


def _positive(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    keep = y > 0
    return x[keep], y[keep]
