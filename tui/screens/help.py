"""The help screen: every key, what it does, and the command palette."""

from __future__ import annotations

from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

#: The rule the dashboard, the README and the exit lines all follow.
RULE = "Ctrl-C stops the run (a checkpoint first; again: at once); q leaves it running (detach)."
#: Key → what it does (longer than the footer's labels). Every key the dashboard answers is here, also those
#: the footer leaves out at the current size or state.
HELP = [
    ("space", "pause / resume training (the engine finishes the step in flight)"),
    ("c", "checkpoint now (atomic; shown in the log with path, size and seconds)"),
    ("a", "abort: g graceful (checkpoint, then stop) · n now · esc cancel"),
    ("t", "tune the run's live settings (batch size, LR, the task's own) with the engine's memory prediction"),
    ("f", "autotune: the engine measures candidate settings that fit on its own steps and keeps the fastest (x in "
          "its table cancels and restores)"),
    ("m", "metric chooser: any logged scalar in any chart; type to filter, 1-4 (empty filter) pick the chart"),
    ("v", "below 100 columns: switch between the two charts"),
    ("o", "compare: overlay another run's curves, aligned by step (x in the picker clears it)"),
    ("l", "charts: log-scaled y axis on/off"),
    ("s", "charts: cycle EMA smoothing (none, 0.6, 0.9, 0.97, 0.99)"),
    ("h", "charts: last 1000 steps ↔ full history (exact min/max of every pixel column's steps)"),
    ("+ / -", "charts: zoom in (down to single steps) / out (to the whole run); a view at the newest step "
              "keeps following it"),
    ("← / →", "charts: pan a quarter of the window earlier / later (back at the newest step it follows again)"),
    ("home", "charts: the run's first steps, keeping the zoom"),
    ("end", "charts: the run's newest steps, following it, keeping the zoom"),
    ("0", "charts: back to the last 1000 steps or the full history (h), following the run"),
    ("p", "processes: the engine and its data workers, or each rank (CPU %, RSS, GPU memory, state)"),
    ("r", "attach: resume a run whose engine is gone (shown only then)"),
    ("ctrl+c", "stop the run: checkpoint, then exit with one line; again: stop at once (exit 130); "
               "before the engine is up: stop the starting engine; read-only: detach"),
    ("q", "detach: the engine keeps running (the exit line says how to attach or stop it); "
          "in-process: asks, quitting stops the run"),
    ("ctrl+p", "command palette: run: … / tune: … / view: … / theme: …"),
    ("?", "this help"),
]


class HelpScreen(ModalScreen[None]):
    """Keys and what they do; any of escape, ? or q closes it.

    The keys sit in a scrolling list between the rule and the hint, so every key can be read at 80×24: the list
    has the focus, and ↑/↓, PgUp/PgDn, Home/End (and the mouse wheel) scroll it. A description that wraps
    keeps to its column, under its own first line.
    """

    BINDINGS = [Binding("escape", "close", "close"), Binding("question_mark", "close", show=False),
                Binding("q", "close", show=False)]

    def __init__(self, read_only: bool = False) -> None:
        super().__init__()
        self.read_only = read_only

    def compose(self):
        with Vertical(classes="dialog wide", id="help-dialog"):
            yield Static(f"[b]sensorlm-tui keys[/b] · {RULE}", classes="dialog-title")
            with VerticalScroll(id="help-keys"):
                for key, text in HELP:
                    with Horizontal(classes="help-row"):
                        yield Static(f"[b][$accent]{key}[/][/b]", classes="help-key")
                        yield Static(text, classes="help-text", markup=False)
                if self.read_only:
                    yield Static("[$warning]read-only viewer: control keys (space, c, a, t, f) are disabled[/]",
                                 classes="help-note")
            yield Static("[$text-muted]↑/↓ PgUp/PgDn scroll · esc / ? close[/]", classes="dialog-hint",
                         id="help-hint")

    def on_mount(self) -> None:
        self.query_one("#help-keys").focus()

    def action_close(self) -> None:
        """Close the help."""
        self.dismiss(None)
