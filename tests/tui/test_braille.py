"""The braille canvas: frame geometry, where dots land, log axes, markers, guides and colours."""

from __future__ import annotations

import numpy as np
import pytest

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


#: (lo, hi, labels at least): below 10⁻³ eight characters hold four digits ("3.000e-4"), so a span in the
#: fifth digit there, or one at float32's last digit, keeps a single label.
Y_SPANS = [(0.0, 4.0, 4), (1.00001, 1.00004, 4), (2.0001, 2.0009, 3), (20_000.0, 20_005.0, 3),
           (123.4561, 123.4569, 2), (2_000_001.0, 2_000_009.0, 2), (1e-5, 5e-5, 2), (3e-4, 3.0004e-4, 1),
           (0.5, 0.5000004, 1)]


@pytest.mark.parametrize("lo,hi,least", Y_SPANS, ids=[f"{lo:g}-{hi:g}" for lo, hi, _ in Y_SPANS])
def test_y_labels_are_distinct_at_every_scale_and_fit_the_label_width(lo: float, hi: float, least: int) -> None:
    """A zoom into a converging loss (1.00001 … 1.00004) or a throughput near 20,000 gets labels that tell its
    ticks apart (four times "1", three times "2.0e4" before); where 8 characters cannot, fewer ticks are labelled."""
    canvas = BrailleCanvas(60, 14, 8)
    canvas.plot([0, 10], [lo, hi])
    labels = [r.split("┤")[0].strip() for r in _cells(canvas.build()) if "┤" in r]
    assert len(labels) >= least and len(set(labels)) == len(labels) and max(map(len, labels)) <= 8, labels
    assert all(lo - (hi - lo) <= float(label) <= hi + (hi - lo) for label in labels), labels


def test_a_zoom_into_a_converging_loss_labels_its_y_axis_apart(tmp_path) -> None:
    """The dashboard's chart of a loss settling in its sixth digit, zoomed to its last 8 steps."""
    from engine.run.steps import StepWriter, open_record
    from tui.model.dashboard import RunModel
    from tui.model.step_source import RecordSteps
    from tui.widgets.metric_chart import MetricChart

    at = np.arange(1, 2001)
    writer = StepWriter(tmp_path / "steps")
    writer.append_columns(at, {"loss": 1 + 1e-6 * (2000 - at)})  # the last 8 steps: 1.000007 … 1
    writer.close()
    model = RunModel()
    model.open_steps(RecordSteps(open_record(tmp_path)))
    chart = MetricChart.detached(model, "loss")
    while chart.extent(model)[1] - chart.extent(model)[0] + 1 > 8:
        chart.zoom(model, 0.5)
    labels = [r.split("┤")[0].strip() for r in chart.build(78, 16).plain.split("\n") if "┤" in r]
    assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
