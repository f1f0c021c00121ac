"""A live run is drawn from its step record alone: the dashboard follows the rows the writer appends, with no step
line in the log (an engine logs them only at a cadence), and a step line whose values differ from the record's
(a cadence line is a copy, never the source) is not what the charts or the progress panel show."""

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

SIZE = (120, 40)
TOTAL = 100_000


def _rows(writer: StepWriter, first: int, last: int) -> None:
    at = np.arange(first, last + 1)
    writer.append_columns(at, {"loss": np.full(len(at), 0.25, np.float32), "t": 1.7e9 + at * 1e-3})
    writer.flush()


def _screen_step(app) -> int:
    found = re.search(rf"step (\d+)/{TOTAL}", screen_text(app))
    return int(found.group(1)) if found else -1


def _shows(app, chart, step: int):
    """True once the progress panel shows ``step`` and the chart ends at it."""
    return lambda: _screen_step(app) == step == chart.extent(app.model)[1]


def test_a_live_run_is_followed_from_its_record_with_no_step_line_in_its_log(tmp_path: Path) -> None:
    run = tmp_path / "live"
    writer = StepWriter(run / "steps")
    _rows(writer, 1, 5_000)
    log = JsonlSink(run / "events.jsonl")
    log(ev.RunStarted(t=1.7e9, name="live", task="toy", total_steps=TOTAL))
    log(ev.StepLogged(t=1.7e9 + 3, step=3_000, loss=77.0))  # a cadence line: a copy of a row, here a wrong one
    log.flush()
    app = AttachApp(lambda: RunClient(run, read_only=True), run, read_only=True)
    try:
        async def scenario() -> None:
            async with app.run_test(size=SIZE) as pilot:
                chart = app.dashboard.query_one("#chart-1")
                await until(pilot, lambda: _screen_step(app) == 5_000 and chart.builds, what="the record's rows")
                for last in (5_500, 9_000, 20_000):  # the writer appends; the log says nothing more
                    _rows(writer, app.model.step + 1, last)
                    await until(pilot, _shows(app, chart, last), what=f"step {last} on screen and charted")
                    env = chart.series(app.model, 100)["env"]
                    assert np.nanmax(env.max) == 0.25 and env.count.sum() == 1000, "the record's values only"
                assert app.model.step_count == 20_000 and app.model.series.from_record
                await pilot.press("h")  # the whole run, the cadence line's step 3,000 in it
                await until(pilot, lambda: chart.extent(app.model) == (1, 20_000), what="the full history")
                env = chart.series(app.model, 100)["env"]
                assert np.nanmax(env.max) == 0.25 and env.count.sum() == 20_000, "step 3,000 is the record's"

        asyncio.run(scenario())
    finally:
        writer.close()
        log.close()


def test_the_progress_line_follows_a_live_record_between_the_other_panels_redraws(tmp_path: Path) -> None:
    """The step a watcher reads comes from its own quick tick (a fraction of a second), not the 1 s text redraw:
    with the text redraw stopped, the progress line still follows the rows the writer appends, and only it (the
    rows below it are repainted at the text rate: each repaint is bytes over SSH)."""
    run = tmp_path / "live"
    writer = StepWriter(run / "steps")
    _rows(writer, 1, 1_000)
    log = JsonlSink(run / "events.jsonl")
    log(ev.RunStarted(t=1.7e9, name="live", task="toy", total_steps=TOTAL))
    log.flush()
    app = AttachApp(lambda: RunClient(run, read_only=True), run, read_only=True)
    try:
        async def scenario() -> None:
            async with app.run_test(size=SIZE) as pilot:
                await until(pilot, lambda: _screen_step(app) == 1_000, what="the record's rows")
                assert app.progress_period < app.text_period
                app.ticks["text"].pause()
                panel = app.dashboard.query_one("#progress")
                below = panel.text.split("\n")[1:]  # the bar, rates, ETA: theirs is the text rate (bytes)
                for last in (1_500, 4_000):
                    _rows(writer, app.model.step + 1, last)
                    await until(pilot, lambda last=last: _screen_step(app) == last, what=f"step {last} on screen")
                assert panel.text.split("\n")[1:] == below
                app.ticks["text"].resume()
                await until(pilot, lambda: panel.text.split("\n")[1:] != below, what="the rows below at the text rate")

        asyncio.run(scenario())
    finally:
        writer.close()
        log.close()
