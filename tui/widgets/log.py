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
"""

from __future__ import annotations

import textwrap
from collections import deque

from rich.style import Style
from rich.text import Text
from textual.color import Color
from textual.widgets import RichLog

#: Theme variable per entry kind.
KIND_VARIABLE = {"eval": "primary", "checkpoint": "success", "setting": "accent", "refused": "error",
                 "warning": "warning", "error": "error", "state": "secondary", "finished": "success",
                 "output": "foreground", "stderr": "warning", "control": "accent"}


class RunLog(RichLog):
    """Append-only log panel fed from ``RunModel.take_log()``."""

    area = "log"

    def __init__(self, **kwargs) -> None:
        super().__init__(max_lines=2000, wrap=False, markup=False, highlight=False, min_width=20, **kwargs)
        self._seen = -1
        #: Plain text of every line written (tests assert on it; bounded like the widget).
        self.plain: list[str] = []
        #: The entries written, to wrap again when the width changes (bounded like the widget).
        self.entries: deque = deque(maxlen=2000)
        self._wrapped_at = 0

    def update_from(self, model, force: bool = False) -> bool:
        """Write pending entries; returns True if any."""
        version = model.versions[self.area]
        if version == self._seen and not force:
            return False
        self._seen = version
        entries = model.take_log()
        width = self._width()
        for entry in entries:
            self._write_entry(entry, width)
            self.entries.append(entry)
            prefix = f"{entry.step:>7} │ " if entry.step is not None else "        │ "
            self.plain.append(prefix + entry.text)
        if len(self.plain) > 2000:
            del self.plain[:-2000]
        return bool(entries)

    def _width(self) -> int:
        width = self.scrollable_content_region.width or (self.app.size.width - 4)
        self._wrapped_at = width
        return width

    def _write_entry(self, entry, width: int) -> None:
        prefix = f"{entry.step:>7} │ " if entry.step is not None else "        │ "
        # Wrapped here, not by RichLog: continuation rows keep the step column (a hanging indent), and
        # the width is the panel's now (RichLog wraps deferred lines at its 78-column minimum).
        chunks = textwrap.wrap(entry.text, max(20, width - len(prefix) - 1), break_on_hyphens=False) or [""]
        for i, chunk in enumerate(chunks):
            line = Text(prefix if i == 0 else "        │ ", style=self._style("state", dim=True))
            line.append(chunk, style=self._style(entry.kind))
            self.write(line)

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
        width = self._width()
        for entry in self.entries:
            self._write_entry(entry, width)

    def _style(self, kind: str, dim: bool = False) -> Style:
        value = self.app.theme_variables.get(KIND_VARIABLE.get(kind, "foreground"))
        try:
            return Style(color=Color.parse(value).rich_color, dim=dim) if value else Style(dim=dim)
        except Exception:  # noqa: BLE001 - an odd theme value falls back to the default colour
            return Style(dim=dim)
