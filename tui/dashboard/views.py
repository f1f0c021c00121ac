"""What the charts show: log-y, smoothing, window, the metric chooser, the narrow layout's tab, a compare overlay.

None of these reach the engine: they change how the viewer draws the run.
A compare overlay reads another run's whole history on a thread worker
(tui.model.compare) and draws it behind every chart, aligned by step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from tui.dashboard.messages import CompareLoaded
from tui.dashboard.watch import Watch
from tui.model.format import one_line, progress_bar
from tui.screens.dashboard import DashboardScreen
from tui.screens.metric import MetricScreen


def read_compare(path: str) -> CompareLoaded:
    """Another run's whole history as a CompareLoaded message, or the one line why it cannot be read (slow on a
    long run: call it from a thread worker)."""
    from tui.model.compare import read_run

    try:
        return CompareLoaded(path, read_run(path))
    except (OSError, ValueError) as exc:
        return CompareLoaded(path, None, one_line(exc))


class ChartViews:
    """The chart toggles, the metric chooser and the compare overlay of one dashboard.

    ``screen()`` is the dashboard screen (its charts); it acts through ``say`` (the status bar), ``redraw``
    (``redraw(force=True)``: every panel now), ``push_screen`` (a modal and its result callback) and
    ``read_in_background(path)`` (the app's thread worker that reads a run with ``read_compare`` and posts it).
    """

    def __init__(self, watch: Watch, screen: Callable[[], DashboardScreen], *, say: Callable[..., None],
                 redraw: Callable[..., None], push_screen: Callable,
                 read_in_background: Callable[[str], object]) -> None:
        self.watch, self.screen = watch, screen
        self.say, self.redraw, self.push_screen, self.read_in_background = say, redraw, push_screen, read_in_background

    def _charts(self) -> list:
        try:
            return self.screen().charts
        except (IndexError, AttributeError):  # not composed yet, or torn down
            return []

    def toggle_log_y(self) -> None:
        """Log-y on every chart."""
        charts = self._charts()
        for chart in charts:
            chart.toggle_log_y()
        if charts:
            self.say(f"charts: log-y {'on' if charts[0].log_y else 'off'}")

    def cycle_smoothing(self) -> None:
        """The next EMA smoothing weight (every chart)."""
        level = None
        for chart in self._charts():
            level = chart.cycle_smoothing()
        if level is not None:
            self.say(f"charts: smoothing {level:g}" if level else "charts: smoothing off (raw)")

    def toggle_window(self) -> None:
        """Recent 1000 steps ↔ full history (every chart)."""
        window = None
        for chart in self._charts():
            window = chart.toggle_window()
        if window is not None:
            self.say(f"charts: {'full history' if window == 'full' else 'last 1000 steps'}")

    def zoom(self, factor: float) -> None:
        """Every chart's span × ``factor`` (½: zoom in), each about what it shows."""
        self._moved(lambda chart: chart.zoom(self.watch.model, factor))

    def pan(self, fraction: float) -> None:
        """Every chart moved by ``fraction`` of its span (negative: earlier)."""
        self._moved(lambda chart: chart.pan(self.watch.model, fraction))

    def to_edge(self, start: bool) -> None:
        """Every chart to the run's first steps (``start``) or its newest, keeping its span."""
        self._moved(lambda chart: chart.to_edge(self.watch.model, start))

    def reset_view(self) -> None:
        """Every chart back to its window (last 1000 steps or the full history), following the run."""
        charts = self._charts()
        for chart in charts:
            chart.reset_view()
        if charts:
            self.say(f"charts: {'full history' if charts[0].window == 'full' else 'last 1000 steps'}")

    def _moved(self, move: Callable) -> None:
        shown = None
        for chart in self._charts():
            shown = move(chart) or shown
        if shown is not None:
            lo, hi = shown
            self.say(f"charts: steps {lo:,}–{hi:,} ({hi - lo + 1:,} steps; 0 resets)")

    def converting(self, done: int, total: int, finished: bool) -> None:
        """An old run's log is being converted into its record: the charts take in the part done, the status
        line shows how far (``finished``: done; a total of 0: it failed)."""
        self.watch.model.set_steps_progress(done, total, finished)
        if not finished:
            self.say(f"converting the old log into a step record {progress_bar(done, total)}", "pending")
        elif total:
            self.say("step record ready: every step of the old log is in it", "ok")
        else:
            self.say("the old log could not be converted: its steps are not drawn", "error")

    def next_chart(self) -> None:
        """In the one-chart layout (< 100 columns), show the other chart."""
        screen, model = self.screen(), self.watch.model
        shown = screen.next_chart()
        chart = screen.query_one(f"#chart-{shown}")
        self.say(f"chart {shown}: {model.describe(chart.shown(model)).label} (v switches, m chooses)")

    def open_chooser(self) -> None:
        """The metric chooser (which scalar each chart shows)."""
        model = self.watch.model
        visible = self.screen().visible_charts()
        target = int(visible[-1].id.rsplit("-", 1)[1]) if visible else 1
        current = {int(c.id.rsplit("-", 1)[1]): c.shown(model) for c in visible}
        self.push_screen(MetricScreen(model.choices(), current, target), self._metric_chosen)

    def _metric_chosen(self, choice: tuple[int, str] | None) -> None:
        if choice is not None:
            self.choose(*choice)

    def choose(self, chart: int, name: str | None) -> None:
        """Chart ``chart`` (1-4) shows ``name`` from now on (None: the primary metric)."""
        model = self.watch.model
        widget = self.screen().query_one(f"#chart-{chart}")
        widget.choose(name)
        widget.update_from(model, force=True)
        shown = widget.shown(model)
        self.say(f"chart {chart}: {model.describe(shown).label or shown}")

    # -------------------------------------------------------------- compare
    def pick_compare(self) -> None:
        """The run picker: overlay another run's curves (or clear the overlay)."""
        from tui.screens.runs import RunPickerScreen

        self.push_screen(RunPickerScreen(self.runs_root(), self.watch.run_dir), self._compare_chosen)

    def runs_root(self) -> Path:
        """Where the run picker lists runs: the parent of this run's directory, else ./runs."""
        return Path(self.watch.run_dir).parent if self.watch.run_dir else Path("runs")

    def _compare_chosen(self, path: str | None) -> None:
        if path == "":
            self.watch.model.set_compare(None)
            self.redraw(force=True)
            self.say("compare: cleared")
        elif path:
            self.load_compare(path)

    def load_compare(self, path: str) -> None:
        """Read another run's history on a thread worker and overlay it on every chart, aligned by step."""
        self.say(f"compare: reading {path}…", "pending")
        self.read_in_background(path)

    def compare_loaded(self, message: CompareLoaded) -> None:
        """The other run was read (or could not be): overlay it, or say why not."""
        if message.model is None:
            self.say(f"compare {message.path}: {message.error}", "error")
            return
        self.watch.model.set_compare(message.model)
        self.redraw(force=True)
        name = message.model.started.name if message.model.started else message.path
        self.say(f"compare: {name} ({message.model.step} steps) overlaid, aligned by step", "ok")
