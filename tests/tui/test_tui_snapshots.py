"""Snapshots of the dashboard mid-run, paused, with the tune modal and the abort modal, at 120×40 and 80×24.

The data is a deterministic scripted run (tui.dashboard.scripted.demo_run: seeded noise,
synthetic timestamps), so the pictures only change when the UI does.
Regenerate after an intended change with ``pytest tests/tui/test_tui_snapshots.py --snapshot-update``
and look at the report before committing.
"""

from __future__ import annotations

import pytest
from textual.widgets import Input

from tests.tui.tui_helpers import loaded, wait_for
from tui.dashboard.app import DashboardApp
from tui.dashboard.scripted import ScriptedSession, demo_run

SIZES = pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])


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


@SIZES
def test_tune_modal(snap_compare, size):
    assert snap_compare(_app(), terminal_size=size, run_before=_then("t", screen="TuneScreen"))


@SIZES
def test_abort_modal(snap_compare, size):
    assert snap_compare(_app(), terminal_size=size, run_before=_then("a", screen="AbortScreen"))
