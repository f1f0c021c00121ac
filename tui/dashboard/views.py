"""What the charts show: log-y, smoothing, window, the metric chooser, the narrow layout's tab, a compare overlay.

None of these reach the engine: they change how the viewer draws the run.
A compare overlay reads another run's whole history on a thread worker
(tui.model.compare) and draws it behind every chart, aligned by step.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from tui.dashboard.messages import CompareLoaded
from tui.screens.metric import MetricScreen


class ChartViews:
    """The chart toggles, the metric chooser and the compare overlay of ``app`` (a DashboardApp)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def _charts(self) -> list:
        return self.app.panels("plots")

    def toggle_log_y(self) -> None:
        """Log-y on every chart."""
        charts = self._charts()
        for chart in charts:
            chart.toggle_log_y()
        if charts:
            self.app.say(f"charts: log-y {'on' if charts[0].log_y else 'off'}")

    def cycle_smoothing(self) -> None:
        """The next EMA smoothing weight (every chart)."""
        level = None
        for chart in self._charts():
            level = chart.cycle_smoothing()
        if level is not None:
            self.app.say(f"charts: smoothing {level:g}" if level else "charts: smoothing off (raw)")

    def toggle_window(self) -> None:
        """Recent 1000 steps ↔ full history (every chart)."""
        window = None
        for chart in self._charts():
            window = chart.toggle_window()
        if window is not None:
            self.app.say(f"charts: {'full history' if window == 'full' else 'last 1000 steps'}")

    def next_chart(self) -> None:
        """In the one-chart layout (< 100 columns), show the other chart."""
        app = self.app
        shown = app.dashboard.next_chart()
        chart = app.dashboard.query_one(f"#chart-{shown}")
        app.say(f"chart {shown}: {app.model.describe(chart.shown(app.model)).label} (v switches, m chooses)")

    def open_chooser(self) -> None:
        """The metric chooser (which scalar each chart shows)."""
        app = self.app
        if isinstance(app.screen, MetricScreen):
            return
        visible = app.dashboard.visible_charts()
        target = int(visible[-1].id.rsplit("-", 1)[1]) if visible else 1
        current = {int(c.id.rsplit("-", 1)[1]): c.shown(app.model) for c in visible}
        app.push_screen(MetricScreen(app.model.choices(), current, target), self._metric_chosen)

    def _metric_chosen(self, choice: tuple[int, str] | None) -> None:
        if choice is not None:
            self.choose(*choice)

    def choose(self, chart: int, name: str | None) -> None:
        """Chart ``chart`` (1-4) shows ``name`` from now on (None: the primary metric)."""
        app = self.app
        widget = app.dashboard.query_one(f"#chart-{chart}")
        widget.choose(name)
        widget.update_from(app.model, force=True)
        shown = widget.shown(app.model)
        app.say(f"chart {chart}: {app.model.describe(shown).label or shown}")

    # -------------------------------------------------------------- compare
    def pick_compare(self) -> None:
        """The run picker: overlay another run's curves (or clear the overlay)."""
        from tui.screens.runs import RunPickerScreen

        if not isinstance(self.app.screen, RunPickerScreen):
            self.app.push_screen(RunPickerScreen(self.runs_root(), self.app.run_dir), self._compare_chosen)

    def runs_root(self) -> Path:
        """Where the run picker lists runs: the parent of this run's directory, else ./runs."""
        return Path(self.app.run_dir).parent if self.app.run_dir else Path("runs")

    def _compare_chosen(self, path: str | None) -> None:
        if path == "":
            self.app.model.set_compare(None)
            self.app.redraw(force=True)
            self.app.say("compare: cleared")
        elif path:
            self.load_compare(path)

    def load_compare(self, path: str) -> None:
        """Read another run's history on a thread worker and overlay it on every chart, aligned by step."""
        self.app.say(f"compare: reading {path}…", "pending")
        self.app.run_worker(partial(self._read_compare, path), thread=True, exit_on_error=False, group="compare",
                            name="compare")

    def _read_compare(self, path: str) -> None:
        from tui.model.compare import read_run

        try:
            other = read_run(path, self.app.model.capacity)
        except (OSError, ValueError) as exc:
            self.app.post_message(CompareLoaded(path, None, str(exc).splitlines()[0] if str(exc) else
                                                type(exc).__name__))
            return
        self.app.post_message(CompareLoaded(path, other))

    def compare_loaded(self, message: CompareLoaded) -> None:
        """The other run was read (or could not be): overlay it, or say why not."""
        app = self.app
        if message.model is None:
            app.say(f"compare {message.path}: {message.error}", "error")
            return
        app.model.set_compare(message.model)
        app.redraw(force=True)
        name = message.model.started.name if message.model.started else message.path
        app.say(f"compare: {name} ({message.model.step} steps) overlaid, aligned by step", "ok")
