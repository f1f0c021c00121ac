"""The metric chooser (``m``): which scalar a chart shows — any the run logs, the primary metric first.

A filter field over a list of every scalar (training: loss, components, grad
norm, LR, throughput; validation: every metric the evals report), each with
its label and unit. Every typed character goes into the field, which is
always visible: the list keeps the metrics whose label, name, unit or kind
hold every word typed ("score 171" finds "Score 171 Å"). ``1``-``4`` pick the
chart to change only while the field is empty (a digit after a word is part
of the filter), and so do ←/→ at any time; ↑/↓ move in the list, enter applies
the highlighted metric, escape keeps everything as it is. Choosing a
training scalar that has a validation partner (loss ↔ val_loss) shows both.
"""

from __future__ import annotations

from textual.binding import Binding
from textual.containers import Vertical
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from tui.widgets.fields import OrderedInput


def matches(choice, words: list[str]) -> bool:
    """True when every word (lower case) is in the choice's label, name, unit or kind."""
    metric = choice.metric
    text = " ".join((metric.label or "", metric.name, metric.unit or "", metric.kind or "")).lower()
    return all(word in text for word in words)


class FilterInput(OrderedInput):
    """The chooser's filter field: it takes every character, except a chart digit while it is empty.

    A focused Input takes every printable key before the screen's bindings see it (and Textual drops a
    binding for a key the Input says it consumes), so the digits reach the chart bindings only because this
    field declines them, twice over, while it is empty."""

    def declines(self, character: str | None) -> bool:
        """True for a chart digit typed into an empty field."""
        return character is not None and len(character) == 1 and character in "1234" and not self.value

    def check_consume_key(self, key: str, character: str | None) -> bool:
        return not self.declines(character) and super().check_consume_key(key, character)

    async def _on_key(self, event) -> None:
        if self.declines(event.character):
            event.prevent_default()  # Input's own handler (Textual calls each class's) would type it in


class MetricScreen(ModalScreen[tuple[int, str] | None]):
    """Pick a metric for one chart; dismisses with (chart, metric name) or None."""

    BINDINGS = [Binding("escape", "cancel", "cancel"),
                Binding("left", "target(-1)", show=False, priority=True),
                Binding("right", "target(1)", show=False, priority=True),
                Binding("up", "move(-1)", show=False, priority=True),
                Binding("down", "move(1)", show=False, priority=True),
                *(Binding(str(i), f"set_target({i})", show=False) for i in (1, 2, 3, 4))]

    def __init__(self, choices: list, current: dict[int, str], target: int) -> None:
        super().__init__()
        self.choices = choices
        #: Chart number → the metric it shows now (the charts on screen).
        self.current = current or {1: ""}
        #: The chart a choice applies to.
        self.target = target if target in self.current else min(self.current)
        #: The choices the filter keeps, in list order.
        self.shown: list = list(choices)

    def compose(self):
        with Vertical(classes="dialog", id="metric-dialog"):
            yield Static("", classes="dialog-title", id="metric-title")
            yield FilterInput(placeholder="type to filter (words: label, name, unit, train/val)", id="metric-filter")
            yield OptionList(*self._options(self.choices), id="metric-list")
            yield Static("[$text-muted]enter show · ↑/↓ move · ←/→ or 1-4 (empty filter) chart · esc cancel[/]",
                         classes="dialog-hint")

    @staticmethod
    def _options(choices: list) -> list[Option]:
        options = []
        for choice in choices:
            metric = choice.metric
            unit = f" ({metric.unit})" if metric.unit else ""
            tag = " [$success]primary[/]" if choice.primary else ""
            kind = "val" if metric.kind == "val" else "train"
            options.append(Option(f"{escape(metric.label or metric.name)}{escape(unit)} "
                                  f"[$text-muted]{kind} · {escape(metric.name)}[/]{tag}", id=metric.name))
        return options

    def on_mount(self) -> None:
        self._show_target()
        self.query_one("#metric-filter", Input).focus()

    @property
    def filter_text(self) -> str:
        """What the filter field holds."""
        return self.query_one("#metric-filter", Input).value

    def on_input_changed(self, event: Input.Changed) -> None:
        words = event.value.lower().split()
        kept = [c for c in self.choices if matches(c, words)]
        # Those whose label or name starts with the first word first ("g": grad norm before "log…").
        self.shown = sorted(kept, key=lambda c: not words or not ((c.metric.label or "").lower().startswith(words[0])
                                                                   or c.name.lower().startswith(words[0])))
        listing = self.query_one("#metric-list", OptionList)
        listing.clear_options()
        listing.add_options(self._options(self.shown))
        listing.highlighted = 0 if self.shown else None

    def on_input_submitted(self, event: Input.Submitted) -> None:
        listing = self.query_one("#metric-list", OptionList)
        if listing.highlighted is not None and self.shown:
            self.dismiss((self.target, self.shown[listing.highlighted].name))

    def _show_target(self) -> None:
        # The target said in words ("Show in chart 2"), then the charts on screen with it bracketed as well as
        # reversed, so it reads in any theme, NO_COLOR and a screen reader ("Show in chart 1 [2]" read as chart 1).
        charts = " ".join(f"[reverse]\\[{i}][/]" if i == self.target else str(i) for i in sorted(self.current))
        others = f" [$text-muted]· on screen: {charts}[/]" if len(self.current) > 1 else ""
        self.query_one("#metric-title", Static).update(f"[b]Show in chart {self.target}[/b]{others}")
        names = [c.name for c in self.shown]
        shown = self.current.get(self.target)
        self.query_one("#metric-list", OptionList).highlighted = names.index(shown) if shown in names else (
            0 if names else None)

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

    def action_move(self, delta: int) -> None:
        """Move the highlight in the list (the filter field keeps the keyboard)."""
        listing = self.query_one("#metric-list", OptionList)
        if self.shown:
            at = listing.highlighted if listing.highlighted is not None else 0
            listing.highlighted = max(0, min(len(self.shown) - 1, at + delta))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss((self.target, event.option.id))

    def action_cancel(self) -> None:
        """Close without a change."""
        self.dismiss(None)
