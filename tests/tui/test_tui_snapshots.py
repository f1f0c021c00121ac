"""Snapshots of the dashboard mid-run, paused, with the tune modal and the abort modal, at 120×40 and 80×24; of the
autotune table (searching, then chosen), the help and the tune modal with an error fixed at 120×40, 100×30 and
80×24 (tests/tui/test_tui_autotune.py and test_tui_modals_fit.py check the same screens' text).

The data is a deterministic scripted run (tui.dashboard.scripted.demo_run: seeded noise,
synthetic timestamps), so the pictures only change when the UI does.
Regenerate after an intended change with ``pytest tests/tui/test_tui_snapshots.py --snapshot-update``
and look at the report before committing.
"""

from __future__ import annotations

import pytest
from textual.widgets import Input

from tests.tui.tui_helpers import MID_SEARCH, finish_search, loaded, searching, wait_for
from tui.dashboard.app import DashboardApp
from tui.dashboard.scripted import ScriptedSession, demo_run

SIZES = pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])
THREE_SIZES = pytest.mark.parametrize("size", [(120, 40), (100, 30), (80, 24)], ids=["120x40", "100x30", "80x24"])


def _app() -> DashboardApp:
    session = ScriptedSession(history=demo_run(300), detachable=True, run_dir="runs/demo-run")
    return DashboardApp(lambda: session)


async def _log_at_end(pilot) -> None:
    # The log scrolls to its end after a write once its size is known; wait for that, not a fixed time.
    log = pilot.app.dashboard.query_one("#log")
    await wait_for(pilot, lambda: len(log.lines) >= len(log.plain) > 0, "log lines rendered")
    log.scroll_end(animate=False)
    await wait_for(pilot, lambda: log.scroll_offset.y == log.max_scroll_y, "log scrolled to its end")


async def _settle(pilot) -> None:
    app = pilot.app
    await loaded(pilot, app)
    app.redraw(force=True)
    await wait_for(pilot, lambda: app.dashboard.query_one("#chart-1").builds > 0, "loss plot drawn")
    await _log_at_end(pilot)
    await pilot.pause(0.1)


def _then(*keys: str, screen: str | None = None, state: str | None = None, status: str | None = None):
    async def run_before(pilot) -> None:
        await _settle(pilot)
        app = pilot.app
        for key in keys:
            await pilot.press(key)
        if screen:
            await wait_for(pilot, lambda: type(app.screen).__name__ == screen, screen)
            for field in app.screen.query(Input):
                field.cursor_blink = False  # a blinking cursor would make the picture depend on timing
        if state:
            await wait_for(pilot, lambda: app.model.state == state, state)
        if status:  # the ack arrives on its own message, possibly after the state change
            await wait_for(pilot, lambda: app.status_text.startswith(status), status)
        app.redraw(force=True)
        await _log_at_end(pilot)
        await pilot.pause(0.1)
    return run_before


@SIZES
def test_mid_run(snap_compare, size):
    assert snap_compare(_app(), terminal_size=size, run_before=_settle)


@SIZES
def test_paused(snap_compare, size):
    assert snap_compare(_app(), terminal_size=size, run_before=_then("space", state="paused", status="pause: done"))


@pytest.mark.slow
@SIZES
def test_tune_modal(snap_compare, size):
    assert snap_compare(_app(), terminal_size=size, run_before=_then("t", screen="TuneScreen"))


@SIZES
def test_abort_modal(snap_compare, size):
    assert snap_compare(_app(), terminal_size=size, run_before=_then("a", screen="AbortScreen"))


def _autotune(finished: bool):
    app, session = searching()

    async def run_before(pilot) -> None:
        await wait_for(pilot, lambda: len(app.model.autotune.candidates) == MID_SEARCH and app.session is not None,
                       "the search on the model")
        await _settle(pilot)
        await pilot.press("f")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "AutotuneScreen", "the autotune table")
        if finished:
            finish_search(session)
            await wait_for(pilot, lambda: app.model.autotune.chose is not None, "the choice")
        table = app.screen.query_one("#autotune-table")
        await wait_for(pilot, lambda: table.row_count == len(app.model.autotune.candidates), "every row")
        app.redraw(force=True)
        await _log_at_end(pilot)
        await pilot.pause(0.3)
    return app, run_before


@pytest.mark.slow
@THREE_SIZES
def test_autotune_searching(snap_compare, size):
    app, run_before = _autotune(finished=False)
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.slow
@THREE_SIZES
def test_autotune_chosen(snap_compare, size):
    app, run_before = _autotune(finished=True)
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.slow
@THREE_SIZES
def test_help(snap_compare, size):
    assert snap_compare(_app(), terminal_size=size, run_before=_then("question_mark", screen="HelpScreen"))


async def _tune_error_fixed(pilot) -> None:
    await _then("t", screen="TuneScreen")(pilot)
    app = pilot.app
    tune = app.screen
    tune.query_one("#tune-lr").value = "1e308"
    await pilot.press("ctrl+s")
    await wait_for(pilot, lambda: "fix first" in str(tune.query_one("#tune-results").render()), "the error")
    tune.query_one("#tune-lr").value = "0.001"
    tune.query_one("#tune-batch_size").value = "64"
    estimate = tune.query_one("#tune-estimate")
    await wait_for(pilot, lambda: "lr → 0.001: fits" in str(estimate.render()) and
                   "asking" not in str(estimate.render()), "the engine's verdicts on the fixed form")
    await pilot.pause(0.3)


@pytest.mark.slow
@THREE_SIZES
def test_tune_modal_error_fixed(snap_compare, size):
    assert snap_compare(_app(), terminal_size=size, run_before=_tune_error_fixed)
