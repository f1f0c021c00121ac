"""Base of the text panels: one Static per line, and only lines whose markup changed are repainted.

Textual repaints a widget's whole region when it refreshes, and every styled
run costs a ~35-byte truecolour escape; a 7-line panel whose step counter
ticks would resend all 7 lines. With one Static per line only the line that
changed goes over the wire (measured: the panels' share of the bytes fell
several-fold). ``update(layout=False)``: each line is one row, its size
never changes, and a layout pass would repaint the whole dashboard.
"""

from __future__ import annotations

from textual.containers import Vertical
from textual.widgets import Static


class TextPanel(Vertical):
    """A panel fed from a RunModel area; subclasses implement ``content(model) -> markup`` (lines split on \\n)."""

    #: Which ``RunModel.versions`` counter this panel follows.
    area = ""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._seen = -1
        self._lines: list[str] = []
        #: Line repaints so far (tests and the bytes benchmark read it).
        self.paints = 0

    def content(self, model) -> str:  # pragma: no cover - abstract
        """Content markup for the current model (colours only as $theme variables)."""
        raise NotImplementedError

    def update_from(self, model, force: bool = False, rows: int | None = None) -> bool:
        """Repaint the lines that changed since the last update; returns True if any did. ``rows``: only the first
        that many (the progress panel's step row, on its own faster timer), leaving the model's change unseen so
        the next full update repaints whatever else of it changed."""
        if not self.is_mounted:
            return False
        version = model.versions[self.area]
        if not force and version == self._seen:
            return False
        lines = self.content(model).split("\n")
        if rows is None or len(lines) != len(self._lines):  # (a new row count: every line now, or the first
            self._seen = version                            # rows would wait for the next full update)
            return self._paint(lines, force)
        return self._paint(lines[:rows] + self._lines[rows:], force)

    def _paint(self, lines: list[str], force: bool) -> bool:
        """Show ``lines``, repainting the rows whose markup changed (all with ``force``)."""
        rows = list(self.query_children(Static))
        if len(rows) != len(lines):  # the line count changed (rare): rebuild the rows
            for row in rows[len(lines):]:
                row.remove()
            rows = rows[: len(lines)]
            new = [Static("", classes="panel-line") for _ in range(len(lines) - len(rows))]
            if new:
                self.mount_all(new)
            rows += new
            self._lines = self._lines[: len(rows)] + [None] * (len(lines) - len(self._lines))
        changed = False
        for i, (row, line) in enumerate(zip(rows, lines)):
            if force or self._lines[i] != line:
                row.update(line, layout=False)
                self.paints += 1
                changed = True
        self._lines = lines
        return changed

    @property
    def text(self) -> str:
        """The markup last shown, lines joined (tests assert on it)."""
        return "\n".join(self._lines)
