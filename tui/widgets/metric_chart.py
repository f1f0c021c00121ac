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

Which steps (tui.model.chart_view.Viewport): the newest 1000, or with ``h`` the
whole history; ``+`` / ``-`` zoom down to single steps and out to the whole
run, ``←`` / ``→`` pan, ``0`` resets. Every frame reads only what it draws
from the run's step record: per dot column of the plot the exact envelope
(min, max and last of the column's steps, NaN and inf included) from the
record's pyramid, and the smoothed line; so a frame costs the same at 1k or
100M steps, and no spike is ever lost at any zoom. ``s`` cycles the smoothing
weight; ``l`` toggles a log y-axis.
"""

from __future__ import annotations

import numpy as np
from textual.markup import escape

from tui.model.chart_view import RECENT_STEPS, Viewport, smoothed
from tui.model.ema import LEVELS
from tui.model.format import change_text, short_float, short_label
from tui.widgets.chart import Chart, step_labels, step_ticks
from tui.widgets.fit import Part, fit

#: Marker lines drawn at most (the newest), so a run with hundreds of changes stays legible.
MAX_MARKERS = 12
#: Chart height (rows) from which a title that does not fit one row takes two (a legend of guides wraps).
TWO_ROW_TITLE_FROM = 10
#: Zoom factor of ``+`` (and its inverse for ``-``); pan step as a fraction of the span.
ZOOM, PAN = 0.5, 0.25


class MetricChart(Chart):
    """A chart of ``metric`` (None: the task's primary metric) with its partner, best, guide line and compare run."""

    area = "charts"
    label_width = 8

    def __init__(self, metric: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        #: The chosen scalar's name; None follows the task's primary metric.
        self.metric = metric
        #: Log-scaled y axis.
        self.log_y = False
        #: Index into ema.LEVELS (0 = no smoothing).
        self.smoothing = 3
        #: Which steps are shown (recent / full, zoomed, panned).
        self.view = Viewport()

    @classmethod
    def detached(cls, model, metric: str | None = None) -> "MetricChart":
        """A chart of ``model`` drawn without an app (benchmarks, tests): ``build(width, height)`` is one frame,
        exactly what the dashboard's chart draws at that size, in the terminal's default colours."""
        chart = cls(metric)
        chart._model = model
        chart.color = lambda role: "default"
        return chart

    # ---------------------------------------------------------------- options
    def options_key(self) -> tuple:
        return (self.metric, self.log_y, self.smoothing, self.view.window, self.view.span, self.view.right)

    @property
    def window(self) -> str:
        """"recent" (the newest RECENT_STEPS) or "full" (what ``h`` toggles and ``0`` returns to)."""
        return self.view.window

    @window.setter
    def window(self, value: str) -> None:
        self.view = Viewport(value)

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
        """Recent ↔ full history (a zoom is dropped); returns the new window."""
        self.view = Viewport("full" if self.view.window == "recent" else "recent")
        self.invalidate()
        return self.view.window

    def zoom(self, model, factor: float) -> tuple[int, int] | None:
        """Zoom by ``factor`` (< 1: in); returns the steps now shown (None: nothing to zoom)."""
        return self._move(model, lambda first, last: self.view.zoom(factor, first, last))

    def pan(self, model, fraction: float) -> tuple[int, int] | None:
        """Pan by ``fraction`` of the span (< 0: back in time); returns the steps now shown."""
        return self._move(model, lambda first, last: self.view.pan(fraction, first, last))

    def to_edge(self, model, start: bool) -> tuple[int, int] | None:
        """Show the run's first steps (``start``) or its newest (following them), keeping the span."""
        return self._move(model, lambda first, last: self.view.to_edge(start, first, last))

    def reset_view(self) -> None:
        """Back to the window's own view (``0``)."""
        self.view.reset()
        self.invalidate()

    def _move(self, model, change) -> tuple[int, int] | None:
        span = self.full_range(model)
        if span is None:
            return None
        change(*span)
        self.invalidate()
        return self.view.bounds(*span)

    # ------------------------------------------------------------------ data
    def full_range(self, model) -> tuple[int, int] | None:
        """First and last step the chart can show: its training series' and its evals' (the evaluation before the
        first step, at step 0, is a point of the chart too), and in the full window the compare run's."""
        train, val = model.pair(self.shown(model))
        span = model.step_bounds(train) if train is not None else None
        xs = model.val_series(val)[0] if val is not None else ()
        if len(xs):
            span = (int(xs.min()), int(xs.max())) if span is None else (min(span[0], int(xs.min())),
                                                                          max(span[1], int(xs.max())))
        compare = getattr(model, "compare", None)
        if compare is not None and self.view.window == "full":
            ctrain, cval = compare.pair(self.shown(model))
            other = compare.step_bounds(ctrain) if ctrain else None
            if other is None and cval is not None and len(compare.val_series(cval)[0]):
                xs = compare.val_series(cval)[0]
                other = (int(xs.min()), int(xs.max()))
            if other is not None:
                span = other if span is None else (min(span[0], other[0]), max(span[1], other[1]))
        return span

    def extent(self, model) -> tuple[int, int]:
        """First and last step shown (the viewport over ``full_range``); (0, 0) before any data."""
        span = self.full_range(model)
        return self.view.bounds(*span) if span is not None else (0, 0)

    def series(self, model, columns: int) -> dict:
        """What one frame plots over ``extent``, one entry per dot column (also read by tests and the bench).

        Keys: "env" (the training scalar's exact engine.run.steps.Envelope) and "ema" (its smoothed line), "val"
        ((steps, values) of its validation partner), "cmp" (the compare run's smoothed line), "cmp_val".
        """
        train, val = model.pair(self.shown(model))
        lo, hi = self.extent(model)
        out: dict = {}
        if train is not None and model.step_bounds(train) is not None:
            env = out["env"] = model.step_envelope(train, lo, hi, columns)
            if self.smoothing:
                out["ema"] = smoothed(model.series, train, lo, hi, columns, env, LEVELS[self.smoothing])
        if val is not None:
            out["val"] = model.val_series(val)
        compare = getattr(model, "compare", None)
        if compare is not None:
            ctrain, cval = compare.pair(self.shown(model))
            if ctrain is not None and compare.step_bounds(ctrain) is not None:
                env = compare.step_envelope(ctrain, lo, hi, columns)
                out["cmp"] = smoothed(compare.series, ctrain, lo, hi, columns, env,
                                      LEVELS[self.smoothing] or LEVELS[-1])
            if cval is not None:
                out["cmp_val"] = compare.val_series(cval)
        for key in ("val", "cmp_val"):
            if key in out:
                x, y = out[key]
                keep = (x >= lo) & (x <= hi) & np.isfinite(y)
                out[key] = (x[keep], y[keep])
        return out

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
            parts.append(self._window_part(model))
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

    def _window_part(self, model) -> Part:
        """Which steps are shown: "last 1000", "full history", "last 250" (zoomed), "steps 1.2M–1.3M" (panned);
        "(converting 42%)" while an old run's log becomes its record."""
        progress = getattr(model, "steps_progress", None)
        loading = f" (converting {100 * progress[0] // max(1, progress[1])}%)" if progress else ""
        view = self.view
        if view.right is not None:
            lo, hi = self.extent(model)
            text = "steps " + "–".join(step_labels([lo, hi]))
            return Part(text + loading, text, keep=1)
        if view.span is not None:
            return Part(f"last {view.span}{loading}", f"last {view.span}", keep=1)
        if view.window == "recent":
            return Part(f"last {RECENT_STEPS}{loading}", "recent", keep=1)
        return Part(f"full history{loading}", f"full{loading}", keep=1)

    def placeholder(self, model) -> str | None:
        name = self.shown(model)
        train, val = model.pair(name)
        has = train is not None and model.step_bounds(train) is not None
        if not has and val is not None:
            has = bool(np.isfinite(model.val_series(val)[1]).any())
        if not has:
            if model.starting_up:
                summary = model.model_summary
                return "starting up\n" + "\n".join(model.phase_lines(model.clock())) + (
                    f"\n\n{summary}" if summary else "")
            if train == "loss" or model.step_count == 0:
                return "waiting for the first step…"
            return f"no {model.describe(name).label or name} yet"
        if self.log_y and train is not None and model.step_bounds(train) is not None:
            lo, hi = self.extent(model)
            if not model.step_envelope(train, lo, hi, 1).max[0] > 0:
                return "log-y: no positive value to show (l turns it off)"
        return None

    def draw(self, plot, model, width: int, height: int) -> None:
        lo, hi = self.extent(model)
        plot.step_columns(lo, hi)
        data = self.series(model, plot.dot_columns())
        if self.log_y:
            data = {k: _positive(*v) if isinstance(v, tuple) else v for k, v in data.items()}
            plot.yscale("log")
        name = self.shown(model)
        train, val = model.pair(name)
        if "cmp" in data:
            plot.column_line(data["cmp"], color=self.color("compare"))
        if "cmp_val" in data and len(data["cmp_val"][0]):
            plot.scatter(data["cmp_val"][0].tolist(), data["cmp_val"][1].tolist(), marker="∘",
                         color=self.color("compare"))
        if "env" in data:
            env = data["env"]
            plot.envelope(env.min, env.max, env.last, env.count, color=self.color("raw" if self.smoothing else "ema"))
        if "ema" in data:
            plot.column_line(data["ema"], color=self.color("ema"))
        vx, vy = data.get("val", ((), ()))
        if len(vx):
            if train is None:  # validation only: join the dots
                plot.plot(list(vx), list(vy), marker="braille", color=self.color("line"))
            plot.scatter(list(vx), list(vy), marker="●" if train is not None else "•",
                         color=self.color("val" if train is not None else "line"))
        ys = [np.asarray(vy, np.float64)] if len(vy) else []
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
        if ys and train is None and not self.log_y:  # sparse validation points: a margin so they are not on the frame
            low = min(float(np.nanmin(y)) for y in ys)
            high = max(float(np.nanmax(y)) for y in ys)
            pad = max(abs(high) * 1e-3, 0.08 * (high - low)) or 0.25
            plot.ylim(low - pad, high + pad)
        if train is not None:
            for marker in [m for m in model.markers if lo <= m.step <= hi][-MAX_MARKERS:]:
                plot.vertical_line(marker.step, color=self.color("marker"))
        if hi > lo:
            step_ticks(plot, lo, hi, count=5 if width >= 50 else 4, width=width - self.label_width - 1)


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
