"""The braille canvas: frame geometry, where dots land, log axes, markers, guides and colours."""

from __future__ import annotations

import numpy as np

from tui.widgets.braille import BRAILLE_BASE, BrailleCanvas


def _cells(text) -> list[str]:
    return text.plain.split("\n")


def _is_dots(ch: str) -> bool:
    return BRAILLE_BASE < ord(ch) <= BRAILLE_BASE + 0xFF


def test_a_frame_is_exactly_the_size_asked_for() -> None:
    for width, height in ((78, 16), (40, 8), (12, 4)):
        canvas = BrailleCanvas(width, height)
        canvas.plot(np.arange(100), np.sin(np.arange(100) / 10))
        rows = _cells(canvas.build())
        assert len(rows) == height and all(len(r) == width for r in rows), (width, height, rows)


def test_a_rising_line_goes_from_bottom_left_to_top_right() -> None:
    canvas = BrailleCanvas(40, 12)
    canvas.plot([0, 1], [0, 1])
    rows = _cells(canvas.build())[:-2]  # the plot rows, without the x axis and its labels
    dots = [(r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if _is_dots(ch)]
    assert min(dots, key=lambda d: d[1])[0] == len(rows) - 1  # leftmost dots: bottom row
    assert max(dots, key=lambda d: d[1])[0] == 0  # rightmost: top row
    # A connected line: every plot column between the ends has dots.
    columns = sorted({c for _, c in dots})
    assert columns == list(range(columns[0], columns[-1] + 1))


def test_y_ticks_are_round_numbers_and_x_ticks_use_the_given_labels() -> None:
    canvas = BrailleCanvas(60, 14)
    canvas.plot([0, 500, 1000], [0.0, 2.0, 4.0])
    canvas.xticks([0, 500, 1000], ["0", "500", "1.0k"])
    rows = _cells(canvas.build())
    labels = [r.split("┤")[0].strip() for r in rows if "┤" in r]
    assert labels and all(float(v) in (0, 1, 2, 3, 4) for v in labels)
    assert "1.0k" in rows[-1] and "500" in rows[-1] and rows[-2].count("┬") == 3


def test_log_axis_labels_decades_and_skips_non_positive_values() -> None:
    canvas = BrailleCanvas(50, 14)
    canvas.yscale("log")
    canvas.plot([0, 1, 2, 3], [100.0, 10.0, 1.0, -1.0])
    rows = _cells(canvas.build())
    labels = {r.split("┤")[0].strip() for r in rows if "┤" in r}
    assert labels == {"1", "10", "100"}


def test_markers_replace_the_cell_and_carry_their_colour() -> None:
    canvas = BrailleCanvas(30, 10)
    canvas.plot([0, 10], [0, 10], color=(10, 20, 30))
    canvas.scatter([10], [10], marker="★", color="red")
    text = canvas.build()
    star = text.plain.index("★")
    styles = [str(span.style) for span in text.spans if span.start <= star < span.end]
    assert styles and "red" in styles[-1]
    line_styles = {str(span.style) for span in text.spans}
    assert any("rgb(10,20,30)" in s for s in line_styles)


def test_a_horizontal_guide_sits_on_its_value_row() -> None:
    canvas = BrailleCanvas(30, 10)
    canvas.plot([0, 1], [0, 10])
    canvas.ylim(0, 10)
    canvas.horizontal_line(10)
    rows = _cells(canvas.build())
    assert sum(_is_dots(ch) for ch in rows[0]) > 10  # the top row is the guide at y = 10


def test_empty_and_flat_series_still_draw_a_frame() -> None:
    flat = BrailleCanvas(30, 8)
    flat.plot([0, 1, 2], [5.0, 5.0, 5.0])
    assert any(_is_dots(ch) for ch in flat.build().plain)
    empty = BrailleCanvas(30, 8)
    assert len(_cells(empty.build())) == 8
