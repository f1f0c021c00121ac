"""Old runs open: a run directory written before the step record (every step a line of its events.jsonl) is
converted once when a viewer first opens it, the charts showing the part converted so far at once, then read
from the record like any run; `plot` and `runs` read it too. The log is never changed."""

from __future__ import annotations

import asyncio
import hashlib
import re
import shutil
from pathlib import Path

import pytest

from bench.open_run import write_run
from engine.run.control.client import RunClient
from engine.run.steps import record_dir
from tests.conftest import ROOT
from tests.tui.attach.conftest import screen_text, until
from tui.dashboard.app import DashboardApp
from tui.dashboard.attach_app import AttachApp

SIZE = (120, 40)


class _Watching(AttachApp):
    """AttachApp that notes, at each conversion report, how far it was and what the charts had by then."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.reports: list[tuple[int, int, int]] = []
        #: The status line at each report of a conversion still going on.
        self.said: list[str] = []
        #: "record" for each batch that brings the step record, "report" for each conversion report, as they came.
        self.arrivals: list[str] = []

    def on_event_batch(self, message) -> None:
        if message.steps is not None:
            self.arrivals.append("record")

    def on_steps_progress(self, message) -> None:
        if self._stale(message):
            return
        DashboardApp.on_steps_progress(self, message)  # the model takes the report in, then it is noted
        message.prevent_default()
        self.reports.append((message.done, message.total, self.model.step_count))
        self.arrivals.append("report")
        if not message.finished:
            self.said.append(self.status_text)


def _open(run: Path) -> _Watching:
    app = _Watching(lambda: RunClient(run, read_only=True), run, read_only=True)

    async def scenario() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.model.series.from_record and app.model.steps_progress is None
                        and app.model.step == app.model.total_steps, timeout=120, what="every step from the record")
            chart = app.dashboard.query_one("#chart-1")
            await until(pilot, lambda: chart.builds and f"step {app.model.step}/" in screen_text(app),
                        what="the loss drawn and the last step shown")
            app.screen_shown = screen_text(app)

    asyncio.run(scenario())
    return app


@pytest.mark.parametrize("fixture", ["runs_v1/toy_v1", "runs_v1/sensorlm_v1", "runs_v2/toy_v2"])
def test_a_run_of_an_earlier_release_is_converted_once_then_read_like_any_run(tmp_path, fixture):
    """Every old run directory of the test data (tests/fixtures/README.md: schema 1 and 2 logs, config layouts
    1 and 2), as its release left it."""
    run = tmp_path / Path(fixture).name
    shutil.copytree(ROOT / "tests" / "fixtures" / fixture, run)
    log = (run / "events.jsonl").read_bytes()
    first = _open(run)
    assert first.reports and first.reports[-1][:2] == (1, 1), first.reports  # converted, then "ready"
    # The charts never show a record being converted as if it were whole: the first report comes before it (it
    # came after, and a viewer looking in between saw a complete run with no conversion going on).
    assert first.arrivals[0] == "report" and "record" in first.arrivals, first.arrivals
    assert any(re.search(r"converting the old log into a step record [█░]{20} \d+%", said)
               for said in first.said), first.said  # with a progress bar
    assert "step 4/4" in first.screen_shown
    assert (record_dir(run) / "step.i8").is_file() and (run / "events.jsonl").read_bytes() == log
    again = _open(run)
    assert again.reports == [], "the record is there: nothing converted the second time"
    assert again.model.steps.first_step == 1 and again.model.step == 4

    from tui.commands.plot import draw

    chart = draw([run], "loss", 60, 14)
    assert not chart.left_out and "loss (training) by step" in chart.text
    from tui.commands.runs import row
    from tui.model.run_index import summarize

    listed = row(summarize(run), now=0.0)
    assert listed[0] == Path(fixture).name and "4/4" in listed[2] and listed[4].strip(), listed  # a trend drawn


def test_a_long_old_log_shows_its_first_part_while_the_rest_converts(tmp_path):
    """70,000 steps (two chunks of the log): the charts have the first chunk's steps before the conversion ends."""
    run = tmp_path / "old"
    log = write_run(run, 70_000)
    digest = hashlib.sha256(log.read_bytes()).hexdigest()
    app = _open(run)
    partial = [(done, total, rows) for done, total, rows in app.reports if 0 < done < total]
    assert partial and partial[0][2] > 0, app.reports  # drawn from the record while the conversion went on
    assert any(re.search(r"step record [█░]{20} [1-9]\d?%", said) for said in app.said), app.said
    assert app.model.step_count == 70_000 and app.model.steps.first_step == 1
    assert hashlib.sha256(log.read_bytes()).hexdigest() == digest, "the old log is only read"


def test_a_conversions_reports_handed_over_in_a_bunch_are_all_shown(tmp_path, monkeypatch):
    """A loaded box can hand the conversion child's lines over at once: each report still reaches the UI, so the
    part converted by then is shown as a part, never only the start and the end (a time limit dropped it)."""
    from tui.model import step_open

    run = tmp_path / "old"
    write_run(run, 70_000)  # two chunks of the log
    convert = step_open.convert
    made: list[tuple[int, int]] = []

    def bunched(run_dir, progress=None):
        convert(run_dir, lambda done, total: made.append((done, total)))
        for done, total in made:  # all of them after the conversion, one right after the other
            progress(done, total)

    monkeypatch.setattr(step_open, "convert_apart", bunched)
    app = _open(run)
    assert any(0 < done < total for done, total in made), made
    assert [report[:2] for report in app.reports[:-1]] == made
    assert app.reports[-1][:2] == (1, 1) and app.model.step_count == 70_000
