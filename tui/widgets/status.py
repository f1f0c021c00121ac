"""Status line: the answer to the last key pressed (sent, applied, refused, why a key did nothing).

Never cut off: paths are shortened in the middle first (runs/…/last.safetensors), and a reason that still
does not fit wraps onto up to three rows (the line grows, then shrinks back with the next short message).
"""

from __future__ import annotations

from textual.markup import escape
from textual.widgets import Static

from tui.model.format import middle_ellipsis

#: Theme variable per status kind.
STATUS_COLOR = {"info": "$foreground", "ok": "$success", "refused": "$error", "error": "$error",
                "warning": "$warning", "pending": "$accent"}


class StatusLine(Static):
    """One line under the panels; ``say`` replaces it."""

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        #: The plain text shown (tests assert on it).
        self.message = ""
        self.kind = "info"
        self._rows = 1

    def say(self, text: str, kind: str = "info") -> None:
        """Show ``text`` coloured by ``kind`` (info, ok, refused, error, warning, pending)."""
        self.message, self.kind = text, kind
        width = (self.size.width or self.app.size.width) - 2  # the padding
        shown = middle_ellipsis(text, width, cut_text=False)
        rows = 1 + (len(shown) - 1) // max(1, width)
        # A one-row message needs no layout pass (the common case); a longer one changes the line's height.
        self.update(f"[{STATUS_COLOR.get(kind, '$foreground')}]{escape(shown)}[/]",
                    layout=rows != self._rows or rows > 1)
        self._rows = rows
