"""The dashboard's keys zoom and pan the charts of a 10M-step run down to single steps, and every x axis on the way
keeps its tick labels distinct and exact: + - ← → home end 0 pressed in a Pilot-driven attach, the labels read off
the screen where the loss chart is drawn."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import numpy as np

from engine.run import events as ev
from engine.run.control.client import RunClient
from engine.run.sinks import JsonlSink
from engine.run.steps import StepWriter
from tests.tui.attach.conftest import screen_text, until
from tui.dashboard.attach_app import AttachApp
from tui.model.chart_view import MIN_SPAN, RECENT_STEPS

SIZE = (120, 40)
FIRST, LAST = 9_990_001, 10_000_000  # the newest 10,000 steps of a 10M-step run


def _finished_run(run: Path) -> Path:
    """A run that finished at step 10M whose record holds its last 10,000 steps (a resumed run's record starts
    where it resumed), and its log."""
    at = np.arange(FIRST, LAST + 1)
    writer = StepWriter(run / "steps")
    writer.append_columns(at, {"loss": (2 + np.sin(at / 7.0)).astype(np.float32), "t": 1.7e9 + at * 1e-3})
    writer.close()
    log = JsonlSink(run / "events.jsonl")
    log(ev.RunStarted(t=1.7e9 + FIRST * 1e-3 - 1, name="long", task="toy", total_steps=LAST, start_step=FIRST - 1))
    log(ev.RunFinished(t=1.7e9 + LAST * 1e-3 + 1, status="finished", steps=LAST))
    log.close()
    return run


def _value(label: str) -> float:
    scale = {"k": 1e3, "M": 1e6, "G": 1e9}.get(label[-1], 1)
    return float(label[:-1] if scale != 1 else label) * scale


def _x_labels(app, chart) -> list[str]:
    """The tick labels under the chart's x axis, as the terminal shows them."""
    rows = screen_text(app).splitlines()
    region = chart.content_region
    lines = [rows[y][region.x:region.right] for y in range(region.y, region.bottom)]
    axis = next(i for i in range(len(lines) - 1, -1, -1) if "┬" in lines[i])
    return lines[axis + 1].split()


def _check_axis(app, chart, lo: int, hi: int) -> list[str]:
    labels = _x_labels(app, chart)
    assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
    assert all(lo <= _value(label) <= hi and _value(label) == int(_value(label)) for label in labels), (lo, hi, labels)
    return labels


def test_keys_zoom_to_single_steps_and_pan_with_distinct_labels_at_every_scale(tmp_path: Path) -> None:
    run = _finished_run(tmp_path / "long")
    app = AttachApp(lambda: RunClient(run, read_only=True), run, read_only=True)
    seen: list[tuple[tuple[int, int], list[str]]] = []

    async def scenario() -> None:
        async with app.run_test(size=SIZE) as pilot:
            chart = app.dashboard.query_one("#chart-1")
            await until(pilot, lambda: app.model.series.from_record and app.model.step == LAST and chart.builds,
                        what="the record drawn")

            async def shows(lo: int, hi: int, what: str) -> None:
                await until(pilot, lambda: chart.extent(app.model) == (lo, hi) and _x_labels(app, chart)
                            and all(lo <= _value(x) <= hi for x in _x_labels(app, chart)), what=what)
                seen.append(((lo, hi), _check_axis(app, chart, lo, hi)))

            await shows(LAST - RECENT_STEPS + 1, LAST, "the last 1000 steps")
            assert "10.0M" not in seen[-1][1], seen[-1]
            spans = [RECENT_STEPS]
            while spans[-1] > MIN_SPAN:
                await pilot.press("plus")
                spans.append(max(MIN_SPAN, round(spans[-1] * 0.5)))
                lo, hi = chart.extent(app.model)
                assert hi == LAST and hi - lo + 1 == spans[-1], (spans, lo, hi)
                await shows(lo, hi, f"zoomed to {spans[-1]} steps")
            assert f"charts: steps {LAST - MIN_SPAN + 1:,}–{LAST:,} ({MIN_SPAN} steps; 0 resets)" in app.status_text
            env = chart.series(app.model, 2 * chart.content_region.width)["env"]
            assert env.last_step[env.count > 0].tolist() == list(range(LAST - MIN_SPAN + 1, LAST + 1)), \
                "every one of the 8 steps drawn in a column of its own"
            await pilot.press("left")
            await shows(LAST - MIN_SPAN - 1, LAST - 2, "panned 2 steps earlier")
            await pilot.press("home")
            await shows(FIRST, FIRST + MIN_SPAN - 1, "the record's first steps")
            await pilot.press("right")
            await shows(FIRST + 2, FIRST + MIN_SPAN + 1, "panned 2 steps later")
            await pilot.press("minus")
            lo, hi = chart.extent(app.model)
            assert hi - lo + 1 == 2 * MIN_SPAN, (lo, hi)
            await shows(lo, hi, "zoomed out")
            await pilot.press("end")
            await shows(LAST - 2 * MIN_SPAN + 1, LAST, "the newest steps")
            await pilot.press("0")
            await shows(LAST - RECENT_STEPS + 1, LAST, "the last 1000 steps again")
            await pilot.press("h")
            await shows(FIRST, LAST, "the whole record")

    asyncio.run(scenario())
    assert len(seen) >= 14, seen
    assert all(re.fullmatch(r"\d+(\.\d+)?[kM]?", label) for _, labels in seen for label in labels), seen
