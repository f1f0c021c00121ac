"""The autotune modal: the search's table as it fills in (candidate, predicted and measured peak, rate, noise,
chosen), how it ended, and a key to cancel it (the engine restores the settings in force before it).

The search runs in the engine whether this modal is open or not: closing it only hides the table (the log
keeps a line per candidate), and pressing the autotune key again reopens it.
"""

from __future__ import annotations

from textual import on, work
from textual.binding import Binding
from textual.containers import Vertical
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from engine.run.control import requests as control
from engine.run.events import Refused
from tui.model.autotune import COLUMNS
from tui.screens.answers import Answered, Link, ask

#: Seconds between looks at the model for new rows.
REFRESH_S = 0.5


class AutotuneScreen(ModalScreen[None]):
    """The table of ``model.autotune`` (a tui.model.autotune.AutotuneState).

    ``link(request)`` sends a request to the engine and returns its ack (blocking: called from this screen's
    own thread worker; None for a viewer that may not steer). ``start``: ask the engine for a search as the
    table opens; ``x`` asks it to stop the search and restore the settings before it.
    """

    BINDINGS = [Binding("escape", "close", "close"), Binding("f", "close", "close", show=False),
                Binding("q", "close", show=False), Binding("x", "cancel", "cancel search")]

    def __init__(self, model, link: Link | None, start: bool = False) -> None:
        super().__init__()
        self.model, self.link, self.start = model, link, start
        self._shown: tuple | None = None
        #: What this screen sent and the engine has not answered yet ("starting", "cancelling"), or why a request
        #: failed: shown under the table until the model moves.
        self.waiting = ""

    def compose(self):
        with Vertical(classes="dialog wide", id="autotune-dialog"):
            yield Static("[b]autotune: the fastest settings that fit[/b]", classes="dialog-title")
            yield Static("", id="autotune-headline", classes="dialog-body")
            yield DataTable(id="autotune-table", show_cursor=False, zebra_stripes=True)
            yield Static("", id="autotune-hint", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#autotune-table", DataTable).add_columns(*COLUMNS)
        if self.start and self.link is not None:
            self._request(control.autotune(), "starting the search: waiting for the engine…")
        self.redraw()
        self.set_interval(REFRESH_S, self.redraw)

    def _request(self, request: control.Request, waiting: str) -> None:
        self.waiting = waiting
        self._shown = None
        self._send(request)

    @work(thread=True, exit_on_error=False, group="autotune")
    def _send(self, request: control.Request) -> None:
        """Send ``request`` on this worker's thread; the answer comes back to this screen as Answered (and, through
        the link, to the app, which says it in the status bar and the log)."""
        self.post_message(ask(self.link, request))

    @on(Answered)
    def _answered(self, message: Answered) -> None:
        what = "autotune" if message.request.mode == "start" else f"autotune ({message.request.mode})"
        if isinstance(message.ack, Refused):
            self.waiting = f"{what}: refused — {message.ack.why}"
        elif message.ack is None:
            self.waiting = f"{what}: failed — {message.error or 'no answer'}"
        else:
            self.waiting = ""
        self._shown = None
        self.redraw()

    def redraw(self) -> None:
        """Show what the model knows now (only when it changed)."""
        state = self.model.autotune
        shown = (len(state.candidates), state.chose is not None, state.started is not None and state.started.t,
                 self.waiting)
        if shown == self._shown:
            return
        self._shown = shown
        self.query_one("#autotune-headline", Static).update(escape(state.headline()))
        table = self.query_one("#autotune-table", DataTable)
        table.clear()
        unit = state.unit
        for row in state.rows():
            table.add_row(*row[:4], f"{row[4]} {unit}" if row[4][0].isdigit() else row[4], *row[5:])
        if state.active and self.link is not None:
            hint = "x cancel the search (restores the settings before it) · esc close (the search goes on)"
        else:
            hint = "esc close" + (" (the search goes on in the engine)" if state.active else "")
        waiting = f"{escape(self.waiting)}\n" if self.waiting else ""
        self.query_one("#autotune-hint", Static).update(f"[$text-muted]{waiting}{hint}[/]")

    def action_close(self) -> None:
        """Hide the table."""
        self.dismiss(None)

    def action_cancel(self) -> None:
        """Ask the engine to stop the search and restore the settings in force before it."""
        if self.model.autotune.active and self.link is not None:
            self._request(control.autotune("cancel"), "cancelling the search: waiting for the engine…")
