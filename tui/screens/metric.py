"""The metric chooser (``m``): which scalar a chart shows — any the run logs, the primary metric first.

A list of every scalar (training: loss, components, grad norm, LR,
throughput; validation: every metric the evals report), each with its label
and unit. ``1``-``4`` or ←/→ pick the chart to change, typing the start of a
label jumps to it ("g" grad norm, "lo" loss), enter applies, escape keeps
everything as it is. Choosing a training scalar that has a validation
partner (loss ↔ val_loss) shows both.
"""

from __future__ import annotations

from textual.binding import Binding
from textual.containers import Vertical
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option


class MetricScreen(ModalScreen[tuple[int, str] | None]):
    """Pick a metric for one chart; dismisses with (chart, metric name) or None."""

    BINDINGS = [Binding("escape", "cancel", "cancel"), Binding("left", "target(-1)", show=False),
                Binding("right", "target(1)", show=False),
                *(Binding(str(i), f"set_target({i})", show=False) for i in (1, 2, 3, 4))]

    def __init__(self, choices: list, current: dict[int, str], target: int) -> None:
        super().__init__()
        self.choices = choices
        #: Chart number → the metric it shows now (the charts on screen).
        self.current = current or {1: ""}
        #: The chart a choice applies to.
        self.target = target if target in self.current else min(self.current)

    def compose(self):
        options = []
        for choice in self.choices:
            metric = choice.metric
            unit = f" ({metric.unit})" if metric.unit else ""
            tag = " [$success]primary[/]" if choice.primary else ""
            kind = "val" if metric.kind == "val" else "train"
            options.append(Option(f"{escape(metric.label or metric.name)}{escape(unit)} "
                                  f"[$text-muted]{kind} · {escape(metric.name)}[/]{tag}", id=metric.name))
        with Vertical(classes="dialog", id="metric-dialog"):
            yield Static("", classes="dialog-title", id="metric-title")
            yield OptionList(*options, id="metric-list")
            yield Static("[$text-muted]type to find · enter show · ←/→ or 1-4 chart · esc cancel[/]",
                         classes="dialog-hint")

    def on_mount(self) -> None:
        self._typed = ""
        self._show_target()

    def on_key(self, event) -> None:
        """Type-ahead: letters jump to the first metric whose label or name starts with what was typed."""
        char = event.character
        if not char or not (char.isalpha() or char in "_@ "):
            return
        typed = self._typed + char.lower()
        index = self._find(typed)
        if index is None:  # no match with the longer prefix: start over with this letter
            typed, index = char.lower(), self._find(char.lower())
        self._typed = typed
        if index is not None:
            self.query_one("#metric-list", OptionList).highlighted = index
        event.stop()

    def _find(self, prefix: str) -> int | None:
        for i, choice in enumerate(self.choices):
            if (choice.metric.label or "").lower().startswith(prefix) or choice.name.lower().startswith(prefix):
                return i
        return None

    def _show_target(self) -> None:
        charts = " ".join(f"[reverse]{i}[/]" if i == self.target else str(i) for i in sorted(self.current))
        self.query_one("#metric-title", Static).update(f"[b]Show in chart[/b] {charts}")
        self._typed = ""
        names = [c.name for c in self.choices]
        listing = self.query_one("#metric-list", OptionList)
        shown = self.current.get(self.target)
        listing.highlighted = names.index(shown) if shown in names else 0
        listing.focus()

    def action_target(self, delta: int) -> None:
        """Move the target to the previous / next chart on screen."""
        order = sorted(self.current)
        self.target = order[(order.index(self.target) + delta) % len(order)]
        self._show_target()

    def action_set_target(self, chart: int) -> None:
        """Target chart ``chart`` (when it is on screen)."""
        if chart in self.current:
            self.target = chart
            self._show_target()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss((self.target, event.option.id))

    def action_cancel(self) -> None:
        """Close without a change."""
        self.dismiss(None)
