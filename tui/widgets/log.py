"""The run's log: evals, checkpoints (path, size, seconds), settings, refusals, warnings, captured output.

Entries are drained from the model at the text rate, not per event, so a
training script that prints in a loop costs one repaint per tick. Long lines
wrap (a refusal's reason or a checkpoint path is never cut off), indented
under the step column; there is no horizontal scrollbar. A resize that
changes the width wraps every kept entry again at the new width (a RichLog
keeps its lines as first wrapped: widened, they would stay narrow; narrowed,
they would be cut).
Colours are resolved from the theme when a line is written (a RichLog keeps
rendered lines), so lines written before a theme switch keep their colours.

A long run's history brings thousands of entries at once (an eval every 10k
steps is 10,000 at 100M steps): only the newest ``LOG_LINES`` are written, as
every entry is a line at least and the widget keeps that many lines, and a
batch is written as one Text, one render for all its lines (a write a line
cost ~0.5 ms: seconds before the first frame).
"""

from __future__ import annotations

import textwrap
from collections import deque

from rich.style import Style
from rich.text import Text
from textual.color import Color
from textual.widgets import RichLog

from tui.model.dashboard import LOG_KEPT

#: Theme variable per entry kind.
KIND_VARIABLE = {"eval": "primary", "checkpoint": "success", "setting": "accent", "refused": "error",
                 "warning": "warning", "error": "error", "state": "secondary", "finished": "success",
                 "output": "foreground", "stderr": "warning", "control": "accent"}


#: Lines the panel keeps (its scrollback): the entries the model keeps for it.
LOG_LINES = LOG_KEPT


class RunLog(RichLog):
    """Append-only log panel fed from ``RunModel.take_log()``."""

    area = "log"

    def __init__(self, **kwargs) -> None:
        super().__init__(max_lines=LOG_LINES, wrap=False, markup=False, highlight=False, min_width=20, **kwargs)
        self._seen = -1
        #: Plain text of every line written (tests assert on it; bounded like the widget).
        self.plain: list[str] = []
        #: The entries written, to wrap again when the width changes (bounded like the widget).
        self.entries: deque = deque(maxlen=LOG_LINES)
        self._wrapped_at = 0
        #: Digits of the step column: the run's total steps' (7 at least), so a 100M-step run's rows align.
        self.step_width = 7

    def update_from(self, model, force: bool = False) -> bool:
        """Write pending entries; returns True if any."""
        version = model.versions[self.area]
        if version == self._seen and not force:
            return False
        self._seen = version
        entries = model.take_log()  # the newest LOG_KEPT at most: older ones would be trimmed as soon as written
        total = getattr(model.started, "total_steps", None) or 0
        self.step_width = max(self.step_width, len(f"{max(total, *(e.step or 0 for e in entries), 0)}"))
        self._write_entries(entries, self._width())
        for entry in entries:
            self.entries.append(entry)
            self.plain.append(self._prefix(entry) + entry.text)
        if len(self.plain) > LOG_LINES:
            del self.plain[:-LOG_LINES]
        return bool(entries)

    def _width(self) -> int:
        width = self.scrollable_content_region.width or (self.app.size.width - 4)
        self._wrapped_at = width
        return width

    def _write_entries(self, entries, width: int) -> None:
        """Every row of ``entries`` as one Text: one render for the batch (module docstring)."""
        batch = Text()
        dim, styles = self._style("state", dim=True), {kind: self._style(kind) for kind in {e.kind for e in entries}}
        for n, entry in enumerate(entries):
            prefix = self._prefix(entry)
            # Wrapped here, not by RichLog: continuation rows keep the step column (a hanging indent), and
            # the width is the panel's now (RichLog wraps deferred lines at its 78-column minimum).
            chunks = textwrap.wrap(entry.text, max(20, width - len(prefix) - 1), break_on_hyphens=False) or [""]
            for i, chunk in enumerate(chunks):
                batch.append(("\n" if n or i else "") + (prefix if i == 0 else self._prefix(None)), style=dim)
                batch.append(chunk, style=styles[entry.kind])
        if entries:
            self.write(batch)

    def _prefix(self, entry) -> str:
        """The step column of an entry's first row (blank for an entry without a step, and for continuations)."""
        step = entry.step if entry is not None else None
        return f"{'' if step is None else step:>{self.step_width}} │ "

    def reset(self) -> None:
        """Forget every line (another session's history brings them all again)."""
        self.clear()
        self.plain.clear()
        self.entries.clear()

    def on_resize(self, event) -> None:
        """Wrap every kept entry again when the width changed (module docstring)."""
        width = self.scrollable_content_region.width
        if not width or width == self._wrapped_at or not self.entries:
            return
        self.clear()
        self._write_entries(self.entries, self._width())

    def _style(self, kind: str, dim: bool = False) -> Style:
        value = self.app.theme_variables.get(KIND_VARIABLE.get(kind, "foreground"))
        try:
            return Style(color=Color.parse(value).rich_color, dim=dim) if value else Style(dim=dim)
        except Exception:  # noqa: BLE001 - an odd theme value falls back to the default colour
            return Style(dim=dim)
