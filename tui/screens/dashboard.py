"""The dashboard screen: panels and the control/toggle keys (which act only while no modal is open).

Charts: two side by side from 100 columns (the loss and the task's primary
metric by default); below 100 columns one at a time, ``v`` switching between
them (tabs); from 160×50 a 2×2 grid adds grad norm and the LR. ``m`` chooses
what any chart shows.

The footer follows the state: space reads "pause" or "resume", and a
read-only viewer or an ended run shows no control keys at all (pressing one
still says why it does nothing, through the hidden fallback bindings).
"""

from __future__ import annotations

from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Static

from tui.widgets.header import RunHeader
from tui.widgets.log import RunLog
from tui.widgets.memory import MemoryPanel
from tui.widgets.metric_chart import MetricChart
from tui.widgets.progress import ProgressPanel
from tui.widgets.status import StatusLine
from tui.widgets.system import SystemPanel

#: Keys, shared by the footer, the help screen and the README. The footer shows the keys that do something
#: now (``DashboardApp.check_action``): control keys twice, shown while a control may be sent and hidden behind
#: them to say why not when it may not; the chart toggles shown from 100 columns (``v`` below), each with a
#: hidden twin so the key works at every width; ``q`` reads "detach" or "quit" by what it will do. The chart keys
#: a scrolling panel also answers (← → home end: the log panel, focused by default, scrolls with them) take
#: priority: the help gives them to the charts; the log scrolls with ↑ ↓ PgUp PgDn and the wheel.
KEYS = [
    Binding("space", "app.pause", "pause"),
    Binding("space", "app.resume", "resume"),
    Binding("space", "app.toggle_pause", "pause", show=False),
    Binding("c", "app.checkpoint", "ckpt"),
    Binding("a", "app.abort", "abort"),
    Binding("t", "app.tune", "tune"),
    Binding("f", "app.autotune", "auto"),
    Binding("c", "app.explain('checkpoint')", "ckpt", show=False),
    Binding("a", "app.explain('abort')", "abort", show=False),
    Binding("t", "app.explain('tune')", "tune", show=False),
    Binding("f", "app.explain('autotune')", "auto", show=False),
    Binding("m", "app.choose_metric", "metric"),
    Binding("v", "app.next_chart", "chart"),
    Binding("v", "app.view('next_chart')", "chart", show=False),
    Binding("o", "app.pick_compare", "compare"),
    Binding("l", "app.toggle_log_y", "log-y"),
    Binding("s", "app.cycle_smoothing", "smooth"),
    Binding("h", "app.toggle_window", "hist"),
    Binding("plus,equals_sign", "app.chart('zoom', 0.5)", "zoom in", key_display="+", show=False),
    Binding("minus", "app.chart('zoom', 2.0)", "zoom out", key_display="-", show=False),
    *(Binding(key, f"app.chart{args}", label, key_display=shown, show=False, priority=True) for key, args, label, shown
      in (("left", "('pan', -0.25)", "earlier", "←"), ("right", "('pan', 0.25)", "later", "→"),
          ("home", "('to_edge', True)", "first steps", None), ("end", "('to_edge', False)", "newest steps", None))),
    Binding("0", "app.chart('reset_view')", "reset zoom", show=False),
    Binding("p", "app.processes", "procs"),
    *(Binding(key, f"app.view('{action}')", label, show=False) for key, action, label in (
        ("o", "pick_compare", "compare"), ("l", "toggle_log_y", "log-y"), ("s", "cycle_smoothing", "smooth"),
        ("h", "toggle_window", "hist"), ("p", "processes", "procs"))),
    Binding("question_mark", "app.help", "help", key_display="?"),
    Binding("q", "app.detach_key", "detach"),
    Binding("q", "app.quit_key", "quit"),
]
#: Actions that steer the run: hidden from the footer when no control may be sent.
CONTROL_ACTIONS = ("pause", "resume", "checkpoint", "abort", "tune", "autotune")
#: View keys the footer shows only from a width (below it the footer has no room; the keys still work).
WIDE_ACTIONS = {"abort": 100, "toggle_log_y": 100, "cycle_smoothing": 100, "toggle_window": 100,
                "pick_compare": 120, "processes": 120}
#: From this width two charts show side by side (below, ``v`` switches the one shown).
WIDE_FROM = 100
#: Default metric per chart (None: the task's primary metric).
CHART_METRICS = ("loss", None, "grad_norm", "lr")


class DashboardScreen(Screen):
    """Header, metric charts, progress / memory / system, log, status line, footer.

    Its bindings live on the screen, not the app, so while a modal is up a
    stray ``c`` or space cannot checkpoint or pause the run behind it.
    """

    BINDINGS = KEYS

    def compose(self):
        yield RunHeader(id="header")
        for row, charts in (("plots", (1, 2)), ("plots-more", (3, 4))):
            with Horizontal(id=row):
                for i in charts:
                    with Vertical(id=f"chart-{i}-box", classes="plot-box"):
                        yield Static("", id=f"chart-{i}-title", classes="plot-title")
                        yield MetricChart(CHART_METRICS[i - 1], id=f"chart-{i}", classes="chart")
        with Horizontal(id="panels"):
            yield ProgressPanel(id="progress")
            yield MemoryPanel(id="memory")
            yield SystemPanel(id="system")
        yield RunLog(id="log")
        yield StatusLine(id="status")
        yield Footer(compact=True, show_command_palette=False)  # ctrl+p is in the help; 80 columns fit every key

    def on_mount(self) -> None:
        self.query_one("#progress").border_title = "progress"
        self.query_one("#memory").border_title = "memory"
        self.query_one("#system").border_title = "system"
        self.query_one("#log").border_title = "log"

    @property
    def charts(self) -> list[MetricChart]:
        """Every chart, shown or not (chart-1 … chart-4)."""
        return list(self.query(MetricChart))

    @property
    def tab(self) -> int:
        """Which chart the one-chart (narrow) layout shows: 1 or 2."""
        return 2 if self.has_class("-tab-2") else 1

    def next_chart(self) -> int:
        """Show the other chart in the one-chart layout; returns the chart now shown."""
        self.set_class(self.tab == 1, "-tab-2")
        return self.tab

    def visible_charts(self) -> list[MetricChart]:
        """The charts on screen now, in order."""
        return [c for c in self.charts if c.parent is not None and c.parent.display and c.parent.parent.display]
