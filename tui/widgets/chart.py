"""Base of the dashboard's charts: build only when data, size, options or theme changed; never raise.

Frames are drawn by ``tui.widgets.braille.BrailleCanvas`` (numpy into Rich Text, ~1-2 ms
at 78×16; plotext took ~20 ms of Python, GIL time the training thread wants).
``update_from`` only marks the chart stale when its model area moved, and
``render`` rebuilds only when that (or the size/theme) changed; the app calls
``update_from`` at the plot rate (≤ 1-2 Hz). Axes and tick labels carry no
style: the widget's CSS colour shows through and they cost no escape codes.
Data colours come from the app theme: RGB normally, the 16 ANSI names in an
ansi theme, none at all under NO_COLOR.
"""

from __future__ import annotations

import math
import textwrap
from typing import Any

from rich.text import Text
from textual.color import Color
from textual.geometry import Region
from textual.widget import Widget

from tui.widgets.braille import BrailleCanvas

# Theme variable behind each data role ("default": the widget's CSS colour, the same as the axes).
_ROLE_VARIABLE = {"raw": "default", "ema": "primary", "val": "warning", "marker": "default",
                  "best": "success", "threshold": "error", "line": "primary", "compare": "secondary",
                  "guide": "accent"}
# The same roles in the terminal's own palette (ansi themes).
_ROLE_ANSI = {"raw": "default", "ema": "blue", "val": "yellow", "marker": "default", "best": "green",
              "threshold": "red", "line": "blue", "compare": "magenta", "guide": "cyan"}


class Chart(Widget):
    """A braille chart fed from a RunModel area; subclasses implement ``draw(plot, model, width, height)``."""

    #: Which ``RunModel.versions`` counter this chart follows.
    area = ""
    #: Characters for the y tick labels (None: as wide as the longest; fixed, the plot's width is known before
    #: drawing: a chart reads one envelope column per dot column).
    label_width: int | None = None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._model = None
        self._seen = -1
        self._built_key: tuple | None = None
        self._text = Text("waiting for data…")
        #: Frames built so far (the bench and tests read it).
        self.builds = 0
        #: The last build error, if any (shown in the chart instead of the plot).
        self.error: str | None = None
        #: The one-line title shown above the chart (in the ``#<id>-title`` sibling).
        self.title_text = ""

    # ----------------------------------------------------------------- hooks
    def options_key(self) -> tuple:
        """Anything besides the data that changes the picture (log-y, smoothing, window)."""
        return ()

    def draw(self, plot: BrailleCanvas, model, width: int, height: int) -> None:  # pragma: no cover - abstract
        """Issue the drawing calls for one frame."""
        raise NotImplementedError

    def placeholder(self, model) -> str | None:
        """A message to show instead of an empty plot (no axes drawn), or None when there is data."""
        return None

    def describe(self, model) -> str:
        """The title line for the current model and options (cheap; called with every update)."""
        return ""

    def _sync_title(self) -> None:
        # A title row instead of a CSS border: a border costs two escape runs on every plot row
        # (measured: ~20 % of a frame's bytes), a title row is repainted only when its text changes.
        text = self.describe(self._model) if self._model is not None else ""
        if text == self.title_text:
            return
        rows_changed = text.count("\n") != self.title_text.count("\n")
        self.title_text = text
        if self.parent is not None and self.id:
            for label in self.parent.query_children(f"#{self.id}-title"):
                label.update(text, layout=rows_changed)  # a second title row (a wrapped legend) takes a plot row

    # ---------------------------------------------------------------- driving
    def update_from(self, model, force: bool = False) -> bool:
        """Rebuild if the model's area moved (or ``force``) and repaint only the rows that changed.

        Textual repaints a widget's whole region on ``refresh()``; passing the
        changed rows' regions instead sends only those rows to the terminal
        (the axis box, the tick labels and any part of the curve that did not
        move stay put). Returns True when anything was queued.
        """
        version = model.versions[self.area]
        if not force and version == self._seen and self._model is model:
            return False
        self._model, self._seen = model, version
        self._sync_title()
        if not self.is_mounted or force:
            self._built_key = None
            self.refresh()
            return True
        before = self._text
        width = self.size.width
        after = self.render()  # rebuilds now: the key moved with the version
        rows = _changed_rows(before, after)
        if rows is None:
            self.refresh()
        elif rows:
            self.refresh(*(Region(0, y, width, 1) for y in rows))
        return rows is None or bool(rows)

    def on_resize(self, event) -> None:
        """A title fitted to the old width is fitted again (a still run sends no event that would redo it)."""
        self._sync_title()

    def invalidate(self) -> None:
        """Options changed (a toggle): rebuild at the next render."""
        self._built_key = None
        self._sync_title()
        self.refresh()

    def render(self):
        """The cached frame, rebuilt when data, size, options or theme changed."""
        if self._model is None:
            return self._text
        width, height = self.size.width, self.size.height
        key = (self._seen, width, height, self.options_key(), self.app.theme, self.app.no_color)
        if key == self._built_key:
            return self._text
        self._built_key = key
        if width < 10 or height < 4:
            self._text = Text("(too small)")
            return self._text
        try:
            self._text = self.build(width, height)
            self.error = None
        except Exception as exc:  # noqa: BLE001 - a bad frame must never take the dashboard (or the run) down
            self.error = f"{type(exc).__name__}: {exc}"
            self._text = Text(f"plot error: {self.error}")
            report = getattr(self.app, "report_widget_error", None)
            if report is not None:
                report(self, exc)
        return self._text

    def build(self, width: int, height: int) -> Text:
        """One frame as Rich Text."""
        waiting = self.placeholder(self._model)
        if waiting is not None:  # an empty frame of axes says nothing; a sentence does
            self.builds += 1
            # Wrapped here, one frame row a line: ``update_from`` repaints the rows whose line changed, and a line
            # the terminal wrapped would put a ticking phase clock on a row it never repaints.
            lines = [row for line in waiting.split("\n")
                     for row in (textwrap.wrap(line, width, subsequent_indent="  ") or [""])][:height]
            block = max(len(line) for line in lines)  # one left edge for every line, the block centred
            left = " " * max(0, (width - block) // 2)
            pad = "\n" * max(0, (height - len(lines)) // 2)
            return Text(pad + "\n".join(left + line for line in lines), no_wrap=True, overflow="crop", style="dim")
        canvas = BrailleCanvas(width, height, self.label_width)
        self.draw(canvas, self._model, width, height)
        self.builds += 1
        return canvas.build()

    def color(self, role: str):
        """A canvas colour for a data role, from the current theme ("default" under NO_COLOR)."""
        app = self.app
        if app.no_color or _ROLE_VARIABLE[role] == "default":
            return "default"
        if app.current_theme.ansi or app.ansi_color:
            return _ROLE_ANSI[role]
        value = app.theme_variables.get(_ROLE_VARIABLE[role])
        try:
            return Color.parse(value).rgb if value else "default"
        except Exception:  # noqa: BLE001 - an odd theme value degrades to the terminal colour
            return "default"


def _changed_rows(before: Text, after: Text) -> list[int] | None:
    """Row indices whose text or styling differ; None when the frames cannot be compared row by row."""
    old, new = before.split("\n"), after.split("\n")
    if len(old) != len(new):
        return None
    return [y for y, (a, b) in enumerate(zip(old, new)) if a.plain != b.plain or a.spans != b.spans]


def step_ticks(plot: BrailleCanvas, lo: float, hi: float, count: int = 5, width: int | None = None) -> None:
    """Round integer step ticks inside [lo, hi], labelled as briefly as keeps each one exact (``step_labels``).

    ``width`` (cells across the plot): fewer ticks when their labels would not fit side by side, so the
    canvas never has to drop one.
    """
    if hi <= lo:
        return
    while True:
        ticks = integer_ticks(lo, hi, count)
        labels = step_labels(ticks)
        if width is None or count <= 2 or sum(len(label) + 2 for label in labels) <= width:
            break
        count -= 1
    plot.xticks(ticks, labels)


def integer_ticks(lo: float, hi: float, count: int) -> list[int]:
    """Whole steps inside [lo, hi], 1, 2, 2.5 or 5 times a power of ten apart (never closer than one step):
    at most ``count`` of them, at least two when the range holds two steps."""
    first, last = math.ceil(lo), math.floor(hi)
    if last <= first:
        return [first] if first == last else []
    raw = (last - first) / max(1, count - 1)
    step = 1
    for power in (10 ** k for k in range(0, 20)):
        step = next((m * power for m in (1, 2, 2.5, 5) if m * power >= raw and float(m * power).is_integer()), 0)
        if step:
            break
    step = int(step)
    start = -(-first // step) * step
    ticks = list(range(start, last + 1, step))
    return ticks if len(ticks) >= 2 else [first, last]


def step_labels(ticks: list[int]) -> list[str]:
    """Labels for integer steps that read back to exactly those steps: ``250``, ``1.2k``, ``25M``, or
    ``9999250`` where a suffix would not be shorter than the plain number (a 1,000-step window at 10M steps).
    One form for all the ticks of an axis. So two ticks never share a label, at any zoom of any run length."""
    plain = [str(t) for t in ticks]
    biggest = max((abs(t) for t in ticks), default=0)
    for suffix, exponent in (("G", 9), ("M", 6), ("k", 3)):
        if biggest < 10 ** exponent:
            continue
        # Decimals needed so every tick is exact under this suffix (ticks are whole multiples of 10**zeros).
        zeros = min((_trailing_zeros(t) for t in ticks if t), default=exponent)
        decimals = max(0, exponent - zeros)
        short = [f"{t / 10 ** exponent:.{decimals}f}{suffix}" if t else "0" for t in ticks]
        return short if max(map(len, short)) < max(map(len, plain)) else plain
    return plain


def _trailing_zeros(n: int) -> int:
    n, zeros = abs(n), 0
    while n and n % 10 == 0:
        n //= 10
        zeros += 1
    return zeros
