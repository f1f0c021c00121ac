"""The dashboard screen: panels and the control/toggle keys (which act only while no modal is open)."""

from __future__ import annotations

from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Static

from tui.widgets.header import RunHeader
from tui.widgets.log import RunLog
from tui.widgets.loss_plot import LossPlot
from tui.widgets.memory import MemoryPanel
from tui.widgets.progress import ProgressPanel
from tui.widgets.psnr_plot import PsnrPlot
from tui.widgets.status import StatusLine
from tui.widgets.system import SystemPanel

#: Keys, shared by the footer, the help screen and the README.
KEYS = [
    Binding("space", "app.toggle_pause", "pause"),
    Binding("c", "app.checkpoint", "ckpt"),
    Binding("a", "app.abort", "abort"),
    Binding("t", "app.tune", "tune"),
    Binding("l", "app.toggle_log_y", "log-y"),
    Binding("s", "app.cycle_smoothing", "smooth"),
    Binding("h", "app.toggle_window", "hist"),
    Binding("question_mark", "app.help", "help", key_display="?"),
    Binding("q", "app.request_quit", "quit"),
]


class DashboardScreen(Screen):
    """Header, loss + PSNR plots, progress / memory / system, log, status line, footer.

    Its bindings live on the screen, not the app, so while a modal is up a
    stray ``c`` or space cannot checkpoint or pause the run behind it.
    """

    BINDINGS = KEYS

    def compose(self):
        yield RunHeader(id="header")
        with Horizontal(id="plots"):
            with Vertical(id="loss-box", classes="plot-box"):
                yield Static("loss", id="loss-title", classes="plot-title")
                yield LossPlot(id="loss")
            with Vertical(id="psnr-box", classes="plot-box"):
                yield Static("val PSNR", id="psnr-title", classes="plot-title")
                yield PsnrPlot(id="psnr")
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
