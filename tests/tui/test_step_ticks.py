"""X-axis step ticks: round, whole steps, and labels that read back to exactly their step at any zoom of any run."""

from __future__ import annotations

import pytest

from tui.widgets.braille import BrailleCanvas
from tui.widgets.chart import integer_ticks, step_labels, step_ticks


def _value(label: str) -> float:
    scale = {"k": 1e3, "M": 1e6, "G": 1e9}.get(label[-1], 1)
    return float(label[:-1] if scale != 1 else label) * scale


WINDOWS = [(last - span + 1, last) for last in (10_000_000, 100_000_000) for span in (10, 1_000)]
WINDOWS += [(1, 10_000_000), (0, 100_000_000), (1, 1_000), (3, 7)]


@pytest.mark.parametrize("lo,hi", WINDOWS, ids=[f"{lo}-{hi}" for lo, hi in WINDOWS])
def test_labels_are_distinct_and_exact_for_10m_and_100m_runs_at_every_span(lo, hi) -> None:
    ticks = integer_ticks(lo, hi, 5)
    labels = step_labels(ticks)
    assert len(ticks) >= 2 and all(lo <= t <= hi for t in ticks), ticks
    assert len(set(labels)) == len(labels), labels
    assert [_value(label) for label in labels] == [float(t) for t in ticks], (ticks, labels)
    assert max(len(label) for label in labels) <= 9, labels  # a tick label stays a tick label


def test_the_last_1000_steps_of_a_10m_run_no_longer_label_every_tick_10m() -> None:
    canvas = BrailleCanvas(80, 12)
    canvas.plot([9_999_000, 9_999_999], [1.0, 2.0])
    canvas.xlim(9_999_000, 9_999_999)
    step_ticks(canvas, 9_999_000, 9_999_999, count=5, width=70)
    labels = canvas.build().plain.split("\n")[-1].split()
    assert len(labels) >= 3 and len(set(labels)) == len(labels), labels
    assert "10.0M" not in labels and all(label.startswith("9999") for label in labels), labels


def test_short_labels_keep_their_suffix_form() -> None:
    assert step_labels(integer_ticks(0, 100_000_000, 5)) == ["0", "25M", "50M", "75M", "100M"]
    assert step_labels(integer_ticks(0, 10_000_000, 5)) == ["0", "2.5M", "5.0M", "7.5M", "10.0M"]
    assert step_labels(integer_ticks(0, 1_234, 5)) == ["0", "500", "1000"]  # "1.0k" is no shorter
    assert step_labels(integer_ticks(99_999_500, 100_000_000, 3)) == ["99999500", "99999750", "100000000"], \
        "one form for an axis: never 99999500 beside 100.0000M"


def test_fewer_ticks_when_their_labels_would_not_fit_the_width() -> None:
    canvas = BrailleCanvas(30, 8)
    canvas.plot([99_999_000, 99_999_999], [1.0, 2.0])
    canvas.xlim(99_999_000, 99_999_999)
    step_ticks(canvas, 99_999_000, 99_999_999, count=5, width=24)
    *_, axis, under = canvas.build().plain.split("\n")
    labels = under.split()
    assert sum(len(label) + 2 for label in labels) <= 24 and axis.count("┬") == len(labels) == 2, (axis, labels)
