"""The resume offer shown when `attach` finds the engine gone (crashed or aborted): r resumes, escape just looks."""

from __future__ import annotations

from textual.binding import Binding
from textual.containers import Vertical
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import Static


class ResumeScreen(ModalScreen[bool]):
    """Offer to continue a stopped run from its newest checkpoint; dismisses True to resume."""

    BINDINGS = [Binding("r", "choose(True)", "resume"), Binding("escape", "choose(False)", "just look"),
                Binding("q", "choose(False)", "just look", show=False)]

    def __init__(self, name: str, liveness: str, step: int, checkpoint: str | None, command: str) -> None:
        super().__init__()
        self.run_name, self.liveness, self.step = name, liveness, step
        self.checkpoint, self.command = checkpoint, command

    def compose(self):
        why = {"crashed": "its engine died (no heartbeat, process gone)",
               "aborted": "it was aborted"}.get(self.liveness, f"it {self.liveness}")
        where = escape(self.checkpoint) if self.checkpoint else "its newest good checkpoint"
        with Vertical(classes="dialog", id="resume-dialog"):
            yield Static(f"[b]{escape(self.run_name)} is not training: {why} at step {self.step}.[/b]",
                         classes="dialog-title")
            yield Static(f"[b][$accent]r[/][/b]  resume from {where}\n"
                         f"    (runs `{escape(self.command)}` in the background and watches it)\n"
                         f"[b][$accent]esc[/][/b] just look at the run", classes="dialog-body", id="resume-body")

    def action_choose(self, resume: bool) -> None:
        """Close with the choice."""
        self.dismiss(resume)
