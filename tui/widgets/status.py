"""Status line: the answer to the last key pressed (sent, applied, refused, why a key did nothing)."""

from __future__ import annotations

from textual.markup import escape
from textual.widgets import Static

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

    def say(self, text: str, kind: str = "info") -> None:
        """Show ``text`` coloured by ``kind`` (info, ok, refused, error, warning, pending)."""
        self.message, self.kind = text, kind
        self.update(f"[{STATUS_COLOR.get(kind, '$foreground')}]{escape(text)}[/]", layout=False)  # one fixed line
