"""A braille line chart drawn with numpy straight into Rich Text: axes, ticks, lines, dots, guide lines.

Why not plotext: a plotext frame of the loss plot cost ~20 ms of Python at
78×16 cells (85 % of it building its canvas cell by cell), the GIL time an
in-process trainer loses, and a dashboard frame's budget is 20 ms. Here a
frame is a few array operations over the 2×4 dots of each cell plus one pass
per row to group equal styles, ~1-2 ms; it draws only what the dashboard's
charts need.

The API mirrors the plotext calls the charts make (``plot``, ``scatter``,
``vertical_line``, ``horizontal_line``, ``xlim``, ``ylim``, ``yscale``,
``xticks``), so a chart's ``draw`` reads the same. Layout: y tick labels and
an axis column on the left, the x axis and its labels in the bottom two rows.
Where several series share a cell their dots are merged and the cell takes
the colour of the last one drawn; markers (``scatter``) replace the cell.
Colours are "default" (the widget's own), an (r, g, b) tuple or a colour name.

Exact envelopes: ``step_columns(lo, hi)`` makes each of the plot's dot columns (two per cell) a column of
steps of [lo, hi], and ``envelope(low, high, last, count)`` lights, in each dot column, exactly the dots from
its ``high`` to its ``low`` (±inf at the plot's edge): the extremes a chart draws are the data's, with no line
drawn across columns to widen them. Dot columns without a step are bridged by a line between their
neighbours' last values; a column of NaN only stays empty. With ``label_width`` fixed the plot's width is
known before drawing (``dot_columns``), so a chart reads exactly one envelope column per dot column.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from rich.style import Style
from rich.text import Text

#: Bit of each dot in a braille cell, indexed [row 0-3][column 0-1] (Unicode braille patterns, U+2800).
_DOT_BITS = np.array([[0x01, 0x08], [0x02, 0x10], [0x04, 0x20], [0x40, 0x80]], np.uint8)
BRAILLE_BASE = 0x2800


class BrailleCanvas:
    """One chart frame of ``width`` × ``height`` cells; issue drawing calls, then ``build()``."""

    def __init__(self, width: int, height: int, label_width: int | None = None) -> None:
        self.width, self.height = width, height
        #: Characters for the y tick labels (None: as wide as the longest label).
        self.label_width = label_width
        self._lines: list[tuple[np.ndarray, np.ndarray, object]] = []
        self._columns: list[tuple[str, tuple, object]] = []  # ("envelope", (low, high, last, count)) or ("line", (y,))
        self._points: list[tuple[np.ndarray, np.ndarray, str, object]] = []
        self._vlines: list[tuple[float, object]] = []
        self._hlines: list[tuple[float, object]] = []
        self._labels: list[tuple[float, str, object]] = []
        self._xlim: tuple[float, float] | None = None
        self._ylim: tuple[float, float] | None = None
        self._log_y = False
        self._xticks: tuple[list[float], list[str]] | None = None
        self._frame: tuple = ()  # the y transform and dot rows of the last build (``dots_of``)

    # ------------------------------------------------------------- drawing calls
    def plot(self, x: Sequence[float], y: Sequence[float], marker: str = "braille", color: object = "default") -> None:
        """A polyline through the points, in braille dots (``marker`` is accepted for plotext parity)."""
        self._lines.append((np.asarray(x, np.float64), np.asarray(y, np.float64), color))

    def scatter(self, x: Sequence[float], y: Sequence[float], marker: str = "•", color: object = "default") -> None:
        """One ``marker`` character in the cell of each point."""
        self._points.append((np.asarray(x, np.float64), np.asarray(y, np.float64), marker, color))

    def vertical_line(self, x: float, color: object = "default") -> None:
        """A dotted vertical guide at ``x``."""
        self._vlines.append((float(x), color))

    def horizontal_line(self, y: float, color: object = "default", label: str = "") -> None:
        """A dotted horizontal guide at ``y``; ``label`` is written on it at the right edge (a legend that
        cannot be cut off by the title's width: the line says what it is)."""
        self._hlines.append((float(y), color))
        if label:
            self._labels.append((float(y), label, color))

    def xlim(self, lo: float, hi: float) -> None:
        """Fix the x range (default: the data's)."""
        self._xlim = (float(lo), float(hi))

    def ylim(self, lo: float, hi: float) -> None:
        """Fix the y range (default: the data's)."""
        self._ylim = (float(lo), float(hi))

    def yscale(self, scale: str) -> None:
        """``"log"`` (base 10; non-positive values are not drawn) or ``"linear"``."""
        self._log_y = scale == "log"

    def dot_columns(self) -> int:
        """Dot columns across the plot (two per cell), known before drawing when ``label_width`` is fixed."""
        if self.label_width is None:
            raise ValueError("dot_columns needs a fixed label_width")
        return 2 * max(1, self.width - self.label_width - 1)

    def step_columns(self, lo: int, hi: int) -> None:
        """Dot column ``i`` shows the ``i``-th of ``dot_columns()`` equal columns of steps [lo, hi]
        (engine.run.steps.envelope.column_edges); a step anywhere else (a dot, a tick) lands in its column."""
        columns = self.dot_columns()
        width = (hi - lo + 1) / columns
        start = lo - 0.5 + 0.5 * width
        self._xlim = (start, start + (columns - 1) * width)

    def envelope(self, low: np.ndarray, high: np.ndarray, last: np.ndarray, count: np.ndarray,
                 color: object = "default") -> None:
        """Per dot column (``dot_columns()`` of them): the dots from ``high`` to ``low``, exactly (module docstring)."""
        self._columns.append(("envelope", (np.asarray(low, np.float64), np.asarray(high, np.float64),
                                           np.asarray(last, np.float64), np.asarray(count)), color))

    def column_line(self, values: np.ndarray, color: object = "default") -> None:
        """A line through one value per dot column (NaN: none there; the line joins across it)."""
        self._columns.append(("line", (np.asarray(values, np.float64),), color))

    def xticks(self, ticks: Sequence[float], labels: Sequence[str] | None = None) -> None:
        """Tick positions along x and their labels (default: the numbers in short form)."""
        self._xticks = ([float(t) for t in ticks], list(labels) if labels is not None else [_short(t) for t in ticks])

    # --------------------------------------------------------------------- frame
    def build(self) -> Text:
        """The frame: exactly ``height`` lines of ``width`` cells."""
        y_lo, y_hi = self._y_range()
        count = max(2, min(5, (self.height - 2) // 3 + 1))
        # Ticks live in the drawn space (log10 of y on a log axis): decades when the range spans two or more.
        y_ticks = (_decades(y_lo, y_hi) if self._log_y else None) or _nice_ticks(y_lo, y_hi, count)
        y_ticks, y_labels = y_axis(y_ticks, self._log_y, self.label_width)
        label_w = self.label_width or max((len(s) for s in y_labels), default=1)
        cols = max(1, self.width - label_w - 1)
        rows = max(1, self.height - 2)
        x_lo, x_hi = self._x_range()
        to_px = _scale(x_lo, x_hi, 2 * cols - 1)
        to_py = _scale(y_hi, y_lo, 4 * rows - 1)  # row 0 is the top

        bits = np.zeros((rows, cols), np.uint8)
        owner = np.full((rows, cols), -1, np.int16)  # index into styles of the last layer with dots there
        styles: list[Style | None] = []

        def stamp(px: np.ndarray, py: np.ndarray, color: object) -> None:
            keep = (px >= 0) & (px < 2 * cols) & (py >= 0) & (py < 4 * rows)
            px, py = px[keep], py[keep]
            if not len(px):
                return
            cy, cx = py // 4, px // 2
            layer = np.zeros((rows, cols), np.uint8)
            np.bitwise_or.at(layer, (cy, cx), _DOT_BITS[py % 4, px % 2])
            bits[:] |= layer
            styles.append(_style(color))
            owner[layer > 0] = len(styles) - 1

        for value, color in self._hlines:
            y = self._ty(np.array([value]))
            if np.isfinite(y).all():
                py = np.rint(to_py(y)).astype(np.int64)
                px = np.arange(0, 2 * cols, 2, dtype=np.int64)  # every other dot: a dotted guide
                stamp(px, np.full(len(px), py[0]), color)
        for value, color in self._vlines:
            px = np.rint(to_px(np.array([value]))).astype(np.int64)
            py = np.arange(0, 4 * rows, 2, dtype=np.int64)
            stamp(np.full(len(py), px[0]), py, color)
        for x, y, color in self._lines:
            y = self._ty(y)
            ok = np.isfinite(x) & np.isfinite(y)
            px, py = _segments(np.rint(to_px(x[ok])).astype(np.int64), np.rint(to_py(y[ok])).astype(np.int64))
            stamp(px, py, color)
        for kind, arrays, color in self._columns:
            dots = self._envelope_dots(*arrays, to_py, 4 * rows) if kind == "envelope" else \
                self._line_dots(arrays[0], to_py)
            stamp(*dots, color)

        chars = np.where(bits > 0, BRAILLE_BASE + bits.astype(np.int32), ord(" ")).astype(np.int32)
        for x, y, marker, color in self._points:
            y = self._ty(y)
            ok = np.isfinite(x) & np.isfinite(y)
            cx = np.rint(to_px(x[ok])).astype(np.int64) // 2
            cy = np.rint(to_py(y[ok])).astype(np.int64) // 4
            keep = (cx >= 0) & (cx < cols) & (cy >= 0) & (cy < rows)
            if keep.any():
                styles.append(_style(color))
                chars[cy[keep], cx[keep]] = ord(marker[0])
                owner[cy[keep], cx[keep]] = len(styles) - 1

        self._stamp_labels(chars, owner, styles, to_py, rows, cols)
        self._frame = (to_py, 4 * rows)
        tick_rows = {int(r): label for r, label in
                     zip(np.rint(to_py(np.array(y_ticks))) // 4, y_labels) if 0 <= r < rows}
        text = Text(no_wrap=True, overflow="crop", end="")
        for r in range(rows):
            label = tick_rows.get(r)
            text.append((label or "").rjust(label_w) + ("┤" if label is not None else "│"))
            _append_runs(text, chars[r], owner[r], styles)
            text.append("\n")
        text.append(" " * label_w + "└" + self._x_axis(cols, to_px) + "\n")
        text.append(" " * (label_w + 1) + self._x_labels(cols, to_px))
        return text

    # ------------------------------------------------------------------ helpers
    def _stamp_labels(self, chars: np.ndarray, owner: np.ndarray, styles: list, to_py, rows: int, cols: int) -> None:
        """Each guide's label at the right edge of its row (the next free row when two guides share one)."""
        taken: set[int] = set()
        for value, label, color in self._labels:
            y = self._ty(np.array([value]))
            if not np.isfinite(y).all() or len(label) >= cols:
                continue
            row = int(np.rint(to_py(y))[0]) // 4
            for candidate in (row, row - 1, row + 1, row - 2, row + 2):
                if 0 <= candidate < rows and candidate not in taken:
                    taken.add(candidate)
                    styles.append(_style(color))
                    chars[candidate, cols - len(label):] = [ord(c) for c in label]
                    owner[candidate, cols - len(label):] = len(styles) - 1
                    break

    def dots_of(self, y: np.ndarray) -> np.ndarray:
        """After ``build``: the dot row (0 at the top) where each value of ``y`` lands (``dot_row``)."""
        return self.dot_row(y, *self._frame)

    def dot_row(self, y: np.ndarray, to_py, rows: int) -> np.ndarray:
        """The dot row (0 at the top) of each value of ``y`` on the plot: ±inf and values past the range at its
        edges; NaN stays NaN (a log axis: values ≤ 0 at the bottom)."""
        y = np.asarray(y, np.float64)
        t = self._ty(y)
        if self._log_y:
            t = np.where(y <= 0, -np.inf, t)
        with np.errstate(invalid="ignore"):
            row = np.rint(to_py(np.clip(t, -1e300, 1e300)))
        return np.where(np.isnan(t), np.nan, np.clip(row, 0, rows - 1))

    def _envelope_dots(self, low, high, last, count, to_py, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """Every dot of an envelope layer: each column's span, then the bridges over empty columns."""
        top, bottom = self.dot_row(high, to_py, rows), self.dot_row(low, to_py, rows)
        drawn = ~np.isnan(top) & ~np.isnan(bottom)
        if self._log_y:
            drawn &= np.asarray(high) > 0  # nothing of the column is on a log axis
        cols = np.flatnonzero(drawn)
        a, b = top[cols].astype(np.int64), bottom[cols].astype(np.int64)
        lengths = b - a + 1
        px = np.repeat(cols, lengths)
        py = np.repeat(a, lengths) + (np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths))
        ends = self.dot_row(last, to_py, rows)
        ends = np.where(np.isnan(ends), (top + bottom) / 2, ends)
        blocked = np.cumsum((np.asarray(count) > 0) & ~drawn)  # a column of NaN only breaks the line
        i, j = cols[:-1], cols[1:]
        keep = (j - i > 1) & (blocked[j] == blocked[i])
        bridge = (i[keep], j[keep]) if keep.any() else None
        if bridge is not None:
            i, j = bridge
            bx, by = _segments_between(i, np.rint(ends[i]).astype(np.int64), j, np.rint(ends[j]).astype(np.int64))
            px, py = np.concatenate([px, bx]), np.concatenate([py, by])
        return px, py

    def _line_dots(self, values: np.ndarray, to_py) -> tuple[np.ndarray, np.ndarray]:
        t = self._ty(values)
        cols = np.flatnonzero(np.isfinite(t))
        return _segments(cols, np.rint(to_py(t[cols])).astype(np.int64))

    def _ty(self, y: np.ndarray) -> np.ndarray:
        if not self._log_y:
            return y
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(y > 0, np.log10(np.where(y > 0, y, 1.0)), np.nan)

    def _y_range(self) -> tuple[float, float]:
        if self._ylim is not None:
            lo, hi = self._ty(np.array(self._ylim)).tolist()
        else:
            values = [self._ty(y) for _, y, _ in self._lines] + [self._ty(y) for _, y, _, _ in self._points]
            values += [self._ty(a) for _, arrays, _ in self._columns for a in arrays[:2] if a.dtype.kind == "f"]
            values += [self._ty(np.array([v])) for v, _ in self._hlines]
            lo, hi = _finite_range(values)
        return _widen(lo, hi)

    def _x_range(self) -> tuple[float, float]:
        if self._xlim is not None:
            lo, hi = self._xlim
        else:
            lo, hi = _finite_range([x for x, _, _ in self._lines] + [x for x, _, _, _ in self._points])
        return _widen(lo, hi)

    def _x_ticks(self, to_px) -> list[tuple[int, str]]:
        if self._xticks is None:
            return []
        return [(int(np.rint(to_px(np.array([t])))[0]) // 2, label) for t, label in zip(*self._xticks)]

    def _x_axis(self, cols: int, to_px) -> str:
        line = ["─"] * cols
        for c, _ in self._x_ticks(to_px):
            if 0 <= c < cols:
                line[c] = "┬"
        return "".join(line)

    def _x_labels(self, cols: int, to_px) -> str:
        row = [" "] * cols
        free_from = 0
        for c, label in sorted(self._x_ticks(to_px)):
            start = min(max(0, c - len(label) // 2), cols - len(label))
            if start < free_from or start < 0:
                continue  # would overlap the previous label: leave it out
            row[start:start + len(label)] = list(label)
            free_from = start + len(label) + 1
        return "".join(row)


def _append_runs(text: Text, chars: np.ndarray, owner: np.ndarray, styles: list) -> None:
    """Append one row, one ``Text.append`` per run of cells sharing a style."""
    line = "".join(map(chr, chars.tolist()))
    cuts = np.flatnonzero(np.diff(owner)) + 1
    start = 0
    for end in [*cuts.tolist(), len(line)]:
        index = int(owner[start])
        text.append(line[start:end], styles[index] if index >= 0 else None)
        start = end


def _segments(px: np.ndarray, py: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every dot on the straight segments between consecutive points (a lone point is one dot)."""
    if len(px) < 2:
        return px, py
    dx, dy = np.diff(px), np.diff(py)
    n = np.maximum(np.abs(dx), np.abs(dy)) + 1  # dots per segment, both ends included
    seg = np.repeat(np.arange(len(dx)), n)
    frac = (np.arange(len(seg)) - np.repeat(np.cumsum(n) - n, n)) / np.repeat(np.maximum(n - 1, 1), n)
    return (np.rint(px[seg] + frac * dx[seg]).astype(np.int64),
            np.rint(py[seg] + frac * dy[seg]).astype(np.int64))


def _segments_between(i: np.ndarray, yi: np.ndarray, j: np.ndarray, yj: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The dots of the straight lines from (i, yi) to (j, yj) in the columns strictly between i and j."""
    gaps = j - i - 1
    px = np.repeat(i, gaps) + 1 + (np.arange(int(gaps.sum())) - np.repeat(np.cumsum(gaps) - gaps, gaps))
    frac = (px - np.repeat(i, gaps)) / np.repeat(j - i, gaps)
    py = np.rint(np.repeat(yi, gaps) + frac * np.repeat(yj - yi, gaps)).astype(np.int64)
    return px, py


def _scale(lo: float, hi: float, size: int):
    span = hi - lo
    return lambda v: (np.asarray(v, np.float64) - lo) / span * size


def _finite_range(arrays: list[np.ndarray]) -> tuple[float, float]:
    finite = [a[np.isfinite(a)] for a in arrays if len(a)]
    finite = [a for a in finite if len(a)]
    if not finite:
        return 0.0, 1.0
    return float(min(a.min() for a in finite)), float(max(a.max() for a in finite))


def _widen(lo: float, hi: float) -> tuple[float, float]:
    """A non-empty range: a flat series gets ±0.5 (or ±5 % of its value) around it."""
    if hi > lo:
        return lo, hi
    pad = max(0.05 * abs(lo), 0.5)
    return lo - pad, hi + pad


def _nice_ticks(lo: float, hi: float, count: int) -> list[float]:
    """Round tick values inside [lo, hi] (1, 2, 2.5 or 5 times a power of ten apart), at least two."""
    raw = (hi - lo) / max(1, count - 1)
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = next((m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw), 10 * power)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]
    return ticks if len(ticks) >= 2 else [lo, hi]


def _decades(lo: float, hi: float) -> list[float] | None:
    """Whole powers of ten inside [lo, hi] (log10 units), or None when fewer than two fit."""
    ticks = [float(k) for k in range(math.ceil(lo - 1e-9), math.floor(hi + 1e-9) + 1)]
    return ticks if len(ticks) >= 2 else None


def y_axis(ticks: list[float], log: bool, width: int | None = None) -> tuple[list[float], list[str]]:
    """The y ticks to label and their labels, all distinct, each at most ``width`` characters (when given).

    One form for the axis: the shortest (4 significant digits, e-notation from 10⁴ and under 10⁻³), else as many
    more digits as tell the ticks apart (a zoom into a converging loss: 1.00001 … 1.00004, not 1 four times), in
    plain form where it fits, else e-notation. Ticks no label of the width tells apart (differences at float32's
    last digit) are thinned: every other one is left out until the rest read apart."""
    while True:
        values = [10 ** t if log else t for t in ticks]
        for digits in range(4, 10):
            for plain in (True, False):
                labels = [_compact(v, width, digits, plain) for v in values]
                if len(set(labels)) == len(labels) and (width is None or max(map(len, labels)) <= width):
                    return ticks, labels
        if len(ticks) <= 2:
            return ticks[:1], [_compact(values[0], width)]
        ticks = ticks[::2] if len(ticks) > 3 else [ticks[0], ticks[-1]]


def _compact(v: float, width: int | None = None, digits: int = 4, plain: bool = True) -> str:
    """A tick value in ``digits`` significant digits (4: a few characters); e-notation from 10⁴ and under 10⁻³, or
    where the plain form is longer than ``width``; ``plain`` False: e-notation, ``digits`` above 4 add places."""
    if v == 0:
        return "0"
    a = abs(v)
    places = 1 if digits == 4 else digits - 3
    short = f"{v:.{places}e}".replace("e+0", "e").replace("e-0", "e-")
    if digits > 4:
        text = f"{v:.{digits}g}"
        return text if plain and "e" not in text else short
    if a >= 1e4 or a < 1e-3:
        return short
    text = f"{v:.4g}"
    return short if width is not None and len(text) > width else text


def _short(n: float) -> str:
    return str(int(n)) if float(n).is_integer() else f"{n:g}"


def _style(color: object) -> Style | None:
    if color in (None, "default"):
        return None
    if isinstance(color, tuple):
        return Style(color=f"rgb({color[0]},{color[1]},{color[2]})")
    return Style(color=str(color))
