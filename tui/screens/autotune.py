"""The autotune modal: the search's table as it fills in (candidate, predicted and measured peak, rate, noise,
chosen), how it ended, and a key to cancel it (the engine restores the settings in force before it).

Every column's values stay readable at 80 columns: the start is said once above the table, each candidate
shows only what it changes from it, and a candidate that does not fit its column's room on one line takes a
line per setting (the other columns' labels shorten first when even one setting would not fit). A table
still wider or taller than the dialog scrolls (it has the focus: arrows, PgUp/PgDn, Home/End).

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
from tui.model.autotune import SEP
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
            yield Static("", id="autotune-start", classes="dialog-body")
            yield DataTable(id="autotune-table", show_cursor=False, zebra_stripes=True)
            yield Static("", id="autotune-hint", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#autotune-table", DataTable).focus()
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

    def on_resize(self) -> None:
        self._shown = None  # the candidates' room changed
        self.call_after_refresh(self.redraw)

    def redraw(self) -> None:
        """Show what the model knows now (only when it changed)."""
        state = self.model.autotune
        room = self._room()
        shown = (len(state.candidates), state.chose is not None, state.started is not None and state.started.t,
                 self.waiting, room)
        if shown == self._shown:
            return
        self._shown = shown
        self.query_one("#autotune-headline", Static).update(escape(state.headline()))
        self.query_one("#autotune-start", Static).update(f"[$text-muted]{escape(state.start_text())}[/]")
        rows = state.rows()
        columns, left = self._columns(state, rows, room)
        cells = [(row[0], row[1] if len(row[1]) <= left else row[1].replace(SEP, "\n"), *row[2:]) for row in rows]
        # Every column at the width of its widest cell, set here: a DataTable measuring its columns as rows arrive
        # drew the rows it had cached at the narrower widths of a frame before (cut cells in a snapshot).
        widths = [max([len(label)] + [len(line) for row in cells for line in row[i].split("\n")])
                  for i, label in enumerate(columns)]
        table = self.query_one("#autotune-table", DataTable)
        table.clear(columns=True)
        for label, width in zip(columns, widths):
            table.add_column(label, width=width)
        for row in cells:
            table.add_row(*row, height=row[1].count("\n") + 1)
        if state.active and self.link is not None:
            hint = "x cancel the search (restores the settings before it) · esc close (the search goes on)"
        else:
            hint = "esc close" + (" (the search goes on in the engine)" if state.active else "")
        waiting = f"{escape(self.waiting)}\n" if self.waiting else ""
        self.query_one("#autotune-hint", Static).update(f"[$text-muted]{waiting}{hint}[/]")

    @staticmethod
    def _columns(state, rows: list[tuple[str, ...]], room: int) -> tuple[tuple[str, ...], int]:
        """The column labels (short ones when a candidate's widest setting would not fit beside the long ones) and
        the cells left for the candidate column in ``room``."""
        widest = max((len(part) for row in rows for part in row[1].split(SEP)), default=0)
        for short in (False, True):
            columns = state.columns(short)
            fixed = sum(max(len(label), *(len(row[i]) for row in rows)) + 2 for i, label in enumerate(columns)
                        if i != 1) if rows else 0
            left = room - fixed - 2  # the candidate column's own padding
            if widest <= left:
                break
        return columns, left

    def _room(self) -> int:
        """Columns the table has on screen (the dialog's inside; estimated from the terminal before layout)."""
        width = self.query_one("#autotune-dialog").content_region.width
        return width or min(110, int(self.app.size.width * 0.96)) - 4

    def action_close(self) -> None:
        """Hide the table."""
        self.dismiss(None)

    def action_cancel(self) -> None:
        """Ask the engine to stop the search and restore the settings in force before it."""
        if self.model.autotune.active and self.link is not None:
            self._request(control.autotune("cancel"), "cancelling the search: waiting for the engine…")
