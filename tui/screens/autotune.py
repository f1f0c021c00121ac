"""The autotune modal: the search's table as it fills in (candidate, predicted and measured peak, rate, noise,
chosen), how it ended, and a key to cancel it (the engine restores the settings in force before it).

The search runs in the engine whether this modal is open or not: closing it only hides the table (the log
keeps a line per candidate), and pressing the autotune key again reopens it.
"""

from __future__ import annotations

from typing import Callable

from textual.binding import Binding
from textual.containers import Vertical
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from tui.model.autotune import COLUMNS

#: Seconds between looks at the model for new rows.
REFRESH_S = 0.5


class AutotuneScreen(ModalScreen[None]):
    """The table of ``model.autotune`` (a tui.model.autotune.AutotuneState); ``cancel()`` asks the engine to stop
    the search and restore (None for a viewer that may not steer)."""

    BINDINGS = [Binding("escape", "close", "close"), Binding("f", "close", "close", show=False),
                Binding("q", "close", show=False), Binding("x", "cancel", "cancel search")]

    def __init__(self, model, cancel: Callable[[], None] | None) -> None:
        super().__init__()
        self.model, self.cancel = model, cancel
        self._shown: tuple | None = None

    def compose(self):
        with Vertical(classes="dialog wide", id="autotune-dialog"):
            yield Static("[b]autotune: the fastest settings that fit[/b]", classes="dialog-title")
            yield Static("", id="autotune-headline", classes="dialog-body")
            yield DataTable(id="autotune-table", show_cursor=False, zebra_stripes=True)
            yield Static("", id="autotune-hint", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#autotune-table", DataTable).add_columns(*COLUMNS)
        self.redraw()
        self.set_interval(REFRESH_S, self.redraw)

    def redraw(self) -> None:
        """Show what the model knows now (only when it changed)."""
        state = self.model.autotune
        shown = (len(state.candidates), state.chose is not None, state.started is not None and state.started.t)
        if shown == self._shown:
            return
        self._shown = shown
        self.query_one("#autotune-headline", Static).update(escape(state.headline()))
        table = self.query_one("#autotune-table", DataTable)
        table.clear()
        unit = state.unit
        for row in state.rows():
            table.add_row(*row[:4], f"{row[4]} {unit}" if row[4][0].isdigit() else row[4], *row[5:])
        if state.active and self.cancel is not None:
            hint = "x cancel the search (restores the settings before it) · esc close (the search goes on)"
        else:
            hint = "esc close" + (" (the search goes on in the engine)" if state.active else "")
        self.query_one("#autotune-hint", Static).update(f"[$text-muted]{hint}[/]")

    def action_close(self) -> None:
        """Hide the table."""
        self.dismiss(None)

    def action_cancel(self) -> None:
        """Ask the engine to stop the search and restore the settings in force before it."""
        if self.model.autotune.active and self.cancel is not None:
            self.cancel()
