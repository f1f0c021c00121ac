"""The process view (``p``): the run's processes with CPU %, resident and GPU memory and state, every second.

What nvitop shows for a training job: the engine and its data workers (or a
distributed job's supervisor and each rank), so a starving loader, a rank
stuck in ``disk-sleep`` or a worker eating memory is one key away. The table
is read on the UI thread: a handful of psutil reads costs well under a
millisecond, once a second, only while the view is open.
"""

from __future__ import annotations

from textual.binding import Binding
from textual.containers import Vertical
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import Static

from tui.model.format import human_bytes
from tui.model.processes import ProcessTable, ProcRow

#: Seconds between reads.
REFRESH_S = 1.0


def table_text(rows: list[ProcRow]) -> str:
    """The rows as a fixed-width table (markup)."""
    lines = [f"[b]{'process':<22} {'pid':>7} {'CPU %':>6} {'RSS':>10} {'GPU mem':>10}  state[/]"]
    for row in rows:
        role = ("  " * row.depth + row.role)[:22]
        cpu = "…" if row.cpu_percent is None else f"{row.cpu_percent:.0f}"
        gpu = human_bytes(row.gpu_memory) if row.gpu_memory is not None else "–"
        lines.append(f"{escape(role):<22} {row.pid:>7} {cpu:>6} {human_bytes(row.rss):>10} {gpu:>10}  "
                     f"{escape(row.state)}")
    return "\n".join(lines)


class ProcessScreen(ModalScreen[None]):
    """The run's processes, refreshed every second; escape, p or q closes it."""

    BINDINGS = [Binding("escape", "close", "close"), Binding("p", "close", show=False),
                Binding("q", "close", show=False)]

    def __init__(self, pid: int | None, run_dir: str | None) -> None:
        super().__init__()
        self.table = ProcessTable(pid)
        self.run_dir = run_dir

    def compose(self):
        with Vertical(classes="dialog wide", id="processes-dialog"):
            yield Static("[b]processes[/b]" + (f" of {escape(self.run_dir)}" if self.run_dir else ""),
                         classes="dialog-title")
            yield Static("", id="processes-table", classes="dialog-body")
            yield Static("[$text-muted]CPU % of one core · every second · esc / p close[/]", classes="dialog-hint")

    def on_mount(self) -> None:
        self.refresh_table()
        self.set_interval(REFRESH_S, self.refresh_table)

    def refresh_table(self) -> None:
        """Read the processes again and show them."""
        rows = self.table.rows()
        text = table_text(rows) if rows else ("[$text-muted]the engine's processes are not visible from here "
                                             "(not started yet, gone, or on another machine)[/]")
        self.query_one("#processes-table", Static).update(text)

    def action_close(self) -> None:
        """Close the view."""
        self.dismiss(None)
