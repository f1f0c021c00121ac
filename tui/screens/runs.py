"""The run picker (``o``): overlay another run's curves on every chart, aligned by step.

Lists the runs next to this one (``tui.model.run_index``: name, state, step), the
newest first; enter overlays the highlighted run, ``x`` clears the overlay,
escape leaves it as it is. ``attach --compare OTHER`` does the same from the
command line.
"""

from __future__ import annotations

from pathlib import Path

from textual.binding import Binding
from textual.containers import Vertical
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option


class RunPickerScreen(ModalScreen[str | None]):
    """Pick a run to compare with; dismisses with its directory, "" to clear the overlay, or None."""

    BINDINGS = [Binding("escape", "close(None)", "cancel"), Binding("x", "close('')", "clear"),
                Binding("o", "close(None)", show=False)]

    def __init__(self, root: Path, this_run: str | None) -> None:
        super().__init__()
        self.root = Path(root)
        self.this_run = Path(this_run).resolve() if this_run else None

    def runs(self) -> list:
        """Runs under ``root`` besides this one, newest first."""
        from tui.model.run_index import list_runs

        try:
            runs = list_runs(self.root)
        except OSError:
            return []
        return [r for r in runs if self.this_run is None or Path(r.path).resolve() != self.this_run]

    def compose(self):
        runs = self.runs()
        options = [Option(f"{escape(r.name)}  [$text-muted]{escape(str(r.state))} · step {r.step}[/]", id=str(r.path))
                   for r in runs]
        with Vertical(classes="dialog", id="runs-dialog"):
            yield Static(f"[b]Compare with a run[/b] [$text-muted]({escape(str(self.root))})[/]",
                         classes="dialog-title")
            if options:
                yield OptionList(*options, id="runs-list")
            else:
                yield Static(f"no other run under {escape(str(self.root))}", classes="dialog-body")
            yield Static("[$text-muted]enter overlay · x clear · esc cancel[/]", classes="dialog-hint")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_close(self, value: str | None) -> None:
        """Close: a run directory, "" (clear the overlay) or None (no change)."""
        self.dismiss(value)
