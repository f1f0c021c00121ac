"""The abort and quit-while-running modals: single keys, a default that does nothing, nothing destructive on enter."""

from __future__ import annotations

from textual.binding import Binding
from textual.containers import Vertical
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import Static


class AbortScreen(ModalScreen[str | None]):
    """Abort the run: g graceful (checkpoint, then stop), n now (no checkpoint), escape cancels."""

    BINDINGS = [Binding("g", "choose('graceful')", "graceful"), Binding("n", "choose('now')", "now"),
                Binding("escape", "choose(None)", "cancel")]

    def __init__(self, name: str, step: int, last_checkpoint: str | None) -> None:
        super().__init__()
        self.run_name, self.step, self.last_checkpoint = name, step, last_checkpoint

    def compose(self):
        last = escape(self.last_checkpoint) if self.last_checkpoint else "none yet"
        with Vertical(classes="dialog danger", id="abort-dialog"):
            yield Static(f"[b]Abort {escape(self.run_name)} at step {self.step}?[/b]", classes="dialog-title")
            yield Static(f"[b][$accent]g[/][/b]  graceful: write a checkpoint, then stop\n"
                         f"[b][$accent]n[/][/b]  now: stop at once, no new checkpoint (last: {last})\n"
                         f"[b][$accent]esc[/][/b] cancel: keep training", classes="dialog-body")

    def action_choose(self, choice: str | None) -> None:
        """Close with the choice (None = cancel)."""
        self.dismiss(choice)


class QuitScreen(ModalScreen[str | None]):
    """Quit while the run is training: abort (g / n), detach (d, process mode only), or escape to stay."""

    BINDINGS = [Binding("g", "choose('graceful')", "abort gracefully"), Binding("n", "choose('now')", "abort now"),
                Binding("d", "detach", "detach"), Binding("escape", "choose(None)", "stay"),
                Binding("q", "choose(None)", "stay", show=False)]

    def __init__(self, name: str, step: int, detachable: bool, run_dir: str | None) -> None:
        super().__init__()
        self.run_name, self.step, self.detachable, self.run_dir = name, step, detachable, run_dir

    def compose(self):
        if self.detachable:
            detach = (f"[b][$accent]d[/][/b]  detach: close the dashboard, the engine keeps training\n"
                      f"    (re-attach: sensorlm-tui attach {escape(self.run_dir or '<run_dir>')})\n")
        else:
            detach = "[$text-muted]    (no detach: the engine runs inside this process; quitting stops it)[/]\n"
        with Vertical(classes="dialog", id="quit-dialog"):
            yield Static(f"[b]{escape(self.run_name)} is still training (step {self.step}). Quit?[/b]",
                         classes="dialog-title")
            yield Static(f"[b][$accent]g[/][/b]  abort gracefully (checkpoint first), then quit\n"
                         f"[b][$accent]n[/][/b]  abort now (no checkpoint), then quit\n"
                         f"{detach}[b][$accent]esc[/][/b] stay", classes="dialog-body", id="quit-body")

    def action_choose(self, choice: str | None) -> None:
        """Close with the choice (None = stay)."""
        self.dismiss(choice)

    def action_detach(self) -> None:
        """Detach when possible; otherwise say why not and stay open."""
        if self.detachable:
            self.dismiss("detach")
        else:
            self.query_one("#quit-body", Static).update(
                "[$error]cannot detach: the engine runs in this process[/]\n"
                "[b][$accent]g[/][/b] / [b][$accent]n[/][/b] abort and quit · [b][$accent]esc[/][/b] stay")
