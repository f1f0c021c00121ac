"""A chart draws exactly what the run did at every zoom: each dot column's min, max and last are a brute-force pass
over the raw steps of that column (NaN and inf included), from the envelope the chart reads down to the braille
dots it lights; zoom and pan reach single steps and the first step.

The run is a step record written as a run writes it (bulk columns, then live rows whose pyramid still lags), with
gaps in the steps, runs and scatters of NaN, +inf and -inf.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine.run.steps import StepWriter, open_record
from engine.run.steps.envelope import column_edges
from tui.model.chart_view import MIN_SPAN, RECENT_STEPS
from tui.model.dashboard import RunModel
from tui.model.step_source import RecordSteps
from tui.widgets.braille import BRAILLE_BASE, BrailleCanvas
from tui.widgets.metric_chart import MetricChart

#: Dot bits of a braille cell, [row][column] (Unicode braille patterns).
DOT_BITS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))
WIDTH, HEIGHT = 70, 14


def _values(rng: np.random.Generator, n: int) -> np.ndarray:
    values = rng.normal(size=n) * 10 ** rng.uniform(-2, 2) + np.linspace(3, 0, n)
    for special in (np.nan, np.inf, -np.inf):
        values[rng.random(n) < 0.002] = special
        start = int(rng.integers(0, n))
        values[start:start + int(rng.integers(50, 400))] = special
    return values.astype(np.float32)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A 72,000-step record: 62,000 rows in bulk, then 10,000 logged row by row (the live tail)."""
    rng = np.random.default_rng(11)
    n, bulk = 72_000, 62_000
    steps = np.cumsum(rng.integers(1, 4, n)).astype(np.int64) + 100
    loss = _values(rng, n)
    path = tmp_path_factory.mktemp("run")
    writer = StepWriter(path / "steps")
    writer.append_columns(steps[:bulk], {"loss": loss[:bulk], "t": steps[:bulk] * 0.01})
    for lo in range(bulk, n, 700):
        for i in range(lo, min(n, lo + 700)):
            writer.append(int(steps[i]), {"loss": float(loss[i]), "t": float(steps[i]) * 0.01})
        writer.flush()
    model = RunModel()
    model.open_steps(RecordSteps(open_record(path)))
    yield model, steps, loss.astype(np.float64)
    writer.close()


def _chart(model) -> MetricChart:
    chart = MetricChart.detached(model, "loss")
    chart.smoothing = 0  # the envelope alone: every lit dot is the data's
    return chart


def _draw(chart: MetricChart, model) -> tuple[BrailleCanvas, np.ndarray]:
    """The chart drawn as the dashboard draws it, and its lit dots as a (dot rows, dot columns) array."""
    canvas = BrailleCanvas(WIDTH, HEIGHT, chart.label_width)
    chart.draw(canvas, model, WIDTH, HEIGHT)
    rows = canvas.build().plain.split("\n")[:HEIGHT - 2]
    cols = WIDTH - chart.label_width - 1
    lit = np.zeros((4 * len(rows), 2 * cols), bool)
    for r, line in enumerate(rows):
        for c, ch in enumerate(line[chart.label_width + 1:]):
            bits = ord(ch) - BRAILLE_BASE
            if 0 <= bits <= 0xFF:
                for dy in range(4):
                    for dx in range(2):
                        lit[4 * r + dy, 2 * c + dx] = bool(bits & DOT_BITS[dy][dx])
    return canvas, lit


def _brute(steps: np.ndarray, values: np.ndarray, lo: int, hi: int, columns: int):
    """Per column of [lo, hi]: count, min and max over the values that are not NaN, the last value."""
    edges = column_edges(lo, hi, columns)
    bounds = np.searchsorted(steps, edges, "left")
    out = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        inside = values[a:b]
        real = inside[~np.isnan(inside)]
        out.append((len(inside), real.min() if len(real) else np.nan, real.max() if len(real) else np.nan,
                    inside[-1] if len(inside) else np.nan))
    return out


def _check(chart: MetricChart, model, steps: np.ndarray, values: np.ndarray) -> int:
    """The envelope the chart reads and the dots it lights against brute force; returns the columns checked."""
    canvas, lit = _draw(chart, model)
    columns = lit.shape[1]
    lo, hi = chart.extent(model)
    env = chart.series(model, columns)["env"]
    want = _brute(steps, values, lo, hi, columns)
    assert env.count.tolist() == [w[0] for w in want]
    np.testing.assert_array_equal(env.min, [w[1] for w in want])
    np.testing.assert_array_equal(env.max, [w[2] for w in want])
    np.testing.assert_array_equal(env.last, [w[3] for w in want])
    checked = 0
    for i, (count, low, high, _) in enumerate(want):
        dots = np.flatnonzero(lit[:, i])
        if count and np.isnan(low):  # NaN only: nothing drawn, and no line drawn across it
            assert not len(dots), (i, dots)
        elif count:
            top, bottom = canvas.dots_of(np.array([high, low])).astype(int)
            assert dots.tolist() == list(range(top, bottom + 1)), (i, high, low, dots)
            checked += 1
    return checked


def test_every_zoom_draws_each_dot_column_exactly_as_a_pass_over_its_raw_steps(run):
    model, steps, values = run
    chart = _chart(model)
    checked = _check(chart, model, steps, values)  # the newest 1000 steps, the live tail
    assert chart.extent(model) == (int(steps[-1]) - RECENT_STEPS + 1, int(steps[-1]))
    chart.toggle_window()
    checked += _check(chart, model, steps, values)  # the whole run: pyramid blocks, ~1,400 steps a column
    assert chart.extent(model) == (int(steps[0]), int(steps[-1]))
    rng = np.random.default_rng(5)
    for _ in range(6):  # random windows: ragged edges, some wider than the pyramid's blocks, some narrower
        span = int(rng.choice([9, 137, 3_001, 40_000]))
        chart.view.span, chart.view.right = span, int(rng.integers(steps[0] + span, steps[-1]))
        checked += _check(chart, model, steps, values)
    assert checked > 500


def test_zoom_and_pan_reach_single_steps_and_the_first_step(run):
    model, steps, values = run
    chart = _chart(model)
    chart.toggle_window()
    spans = []
    while True:
        lo, hi = chart.zoom(model, 0.5)
        spans.append(hi - lo + 1)
        if spans[-1] == MIN_SPAN:
            break
        assert len(spans) < 40
    assert spans == sorted(spans, reverse=True) and spans[-1] == MIN_SPAN
    assert hi == steps[-1], "zooming in on a view at the newest step keeps following it"
    _check(chart, model, steps, values)
    env = chart.series(model, 2 * (WIDTH - chart.label_width - 1))["env"]
    present = steps[(steps >= lo) & (steps <= hi)]
    assert env.count.sum() == len(present) and env.count.max() == 1, "every step in its own dot column"
    assert env.last_step[env.count > 0].tolist() == present.tolist()
    for _ in range(5):  # ← a few times: a quarter of the span each, at least a step
        before = chart.extent(model)
        assert chart.pan(model, -0.25) == (before[0] - 2, before[1] - 2)
    assert chart.to_edge(model, start=True) == (int(steps[0]), int(steps[0]) + MIN_SPAN - 1), "home: the first step"
    assert chart.pan(model, -0.25) == (int(steps[0]), int(steps[0]) + MIN_SPAN - 1), "no further back than it"
    assert chart.view.right is not None
    _check(chart, model, steps, values)
    for _ in range(3):
        chart.zoom(model, 2.0)
    lo, hi = chart.extent(model)
    assert lo == steps[0] and hi - lo + 1 == 8 * MIN_SPAN, "zooming out of the past keeps its place"
    assert chart.to_edge(model, start=False)[1] == steps[-1] and chart.view.right is None, "end: following"
    chart.view.right = int(steps[-1]) - 10
    assert chart.pan(model, 0.25)[1] == steps[-1] and chart.view.right is None, "→ to the newest step: following"
    chart.reset_view()
    assert chart.extent(model) == (int(steps[0]), int(steps[-1]))


def test_the_smoothed_line_is_the_ema_of_the_whole_run_then_the_column_means(run):
    """Up to RAW_SMOOTH values a window's line is the EMA of every value before it (warm-up read back far enough),
    averaged per column; wider, each column's mean of its finite values (the pyramid's sums)."""
    from tui.model.chart_view import RAW_SMOOTH, smoothed
    from tui.model.ema import EmaState, ema_extend

    model, steps, values = run
    full = ema_extend(values, 0.97, EmaState())
    lo, hi = int(steps[30_000]), int(steps[30_999])
    env = model.step_envelope("loss", lo, hi, 97)
    line = smoothed(model.series, "loss", lo, hi, 97, env, 0.97)
    edges = column_edges(lo, hi, 97)
    bounds = np.searchsorted(steps, edges, "left")
    for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        part = full[a:b][np.isfinite(full[a:b])]
        assert (np.isnan(line[i]) and not len(part)) or abs(line[i] - part.mean()) <= 1e-6 * max(1, abs(part.mean()))
    lo, hi = int(steps[0]), int(steps[-1])  # more than RAW_SMOOTH values
    env = model.step_envelope("loss", lo, hi, 53)
    assert env.count.sum() > RAW_SMOOTH
    means = smoothed(model.series, "loss", lo, hi, 53, env, 0.97)
    bounds = np.searchsorted(steps, column_edges(lo, hi, 53), "left")
    want = [values[a:b][np.isfinite(values[a:b])].mean() for a, b in zip(bounds[:-1], bounds[1:])]
    np.testing.assert_allclose(means, want, rtol=1e-9)
