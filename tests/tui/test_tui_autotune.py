"""The autotune table: started and cancelled from its own screen, and every column's values readable at 80×24,
100×30 and 120×40 while a search runs and once it chose (the candidates as what they change from the start)."""

from __future__ import annotations

import pytest

from tests.tui.screens import SIZES
from tests.tui.tui_helpers import (
    MID_SEARCH,
    finish_search,
    make,
    on_screen,
    opened,
    pilot_test,
    searching,
    wait_for,
)
from tests.tui.tui_helpers import dialog_rows as rows_of
from tui.dashboard.app import DashboardApp
from tui.model.autotune import SEP


def dialog_rows(app: DashboardApp) -> list[str]:
    """The autotune dialog's rows as the terminal shows them."""
    return rows_of(app, "#autotune-dialog")


def unreadable(app: DashboardApp) -> list[str]:
    """Every value of the table that the dialog does not show whole, on its row, in column order (a candidate's
    settings on its row or the rows under it); [] when all can be read."""
    state = app.model.autotune
    rows = dialog_rows(app)
    missing = []
    for row in state.rows():
        at = next((i for i, line in enumerate(rows) if line.split()[:1] == [row[0]] and row[2] in line), None)
        if at is None:
            missing.append(f"candidate {row[0]}: no row")
            continue
        line, end = rows[at], 0
        for cell in (c for c in row[2:] if c):
            end = line.find(cell, end)
            if end < 0:
                missing.append(f"candidate {row[0]}: {cell!r} not on {line!r}")
                break
            end += len(cell)
        below = " ".join(rows[at:at + len(row[1].split(SEP))])
        missing += [f"candidate {row[0]}: {part!r}" for part in row[1].split(SEP) if part not in below]
    headline = " ".join(r.strip() for r in rows)
    for text in (state.headline(), state.start_text()):
        if " ".join(text.split()) not in " ".join(headline.split()):
            missing.append(f"not whole: {text!r}")
    return missing


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
@pilot_test
async def test_every_value_of_the_table_is_readable_while_searching_and_once_chosen(size):
    app, session = searching()
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: len(app.model.autotune.candidates) == MID_SEARCH and app.session is not None,
                       "the search on the model")
        await pilot.press("f")
        await on_screen(pilot, "AutotuneScreen")
        await wait_for(pilot, lambda: not unreadable(app), f"every value readable: {unreadable(app)}", timeout=3)
        assert "x cancel the search" in " ".join(dialog_rows(app))
        log = [line.split("│ ", 1)[-1] for line in app.dashboard.query_one("#log").plain]
        assert "autotune: kernel_block 512 21,215 tokens/s ±2% (best so far: faster beyond the noise)" in log, log
        finish_search(session)
        await wait_for(pilot, lambda: app.model.autotune.chose is not None and "chosen" in " ".join(dialog_rows(app)),
                       "the choice in the table")
        await wait_for(pilot, lambda: not unreadable(app), f"every value readable: {unreadable(app)}", timeout=3)
        shown = " ".join(dialog_rows(app))
        assert "chosen: kernel_block 512 · threads 1 · data_workers 2, 27,729 tokens/s (x1.49 the start)" in \
            " ".join(shown.split())
    assert not [r for r in session.sent if r.action == "autotune"], "a search running: f only shows it"


@pytest.mark.slow
@pilot_test
async def test_the_table_starts_a_search_from_its_own_worker_and_x_cancels_it():
    app, session = make()
    async with opened(app) as pilot:
        await pilot.press("f")
        await on_screen(pilot, "AutotuneScreen")
        await wait_for(pilot, lambda: app.model.autotune.active, "the search started")
        await wait_for(pilot, lambda: "searching from step 300" in " ".join(dialog_rows(app)), "its headline")
        assert app.status_text.startswith("autotune: searching from step 300")
        await pilot.press("x")
        await wait_for(pilot, lambda: not app.model.autotune.active, "the search cancelled")
        await wait_for(pilot, lambda: "cancelled: the settings before it restored" in " ".join(dialog_rows(app)),
                       "the cancel in the table")
        assert "x cancel" not in " ".join(dialog_rows(app))
        assert app.status_text.startswith("autotune (cancel): cancelled")
        await pilot.press("x")  # nothing runs: the key does nothing
        await pilot.pause(0.2)
    assert [(r.action, r.mode) for r in session.sent] == [("autotune", "start"), ("autotune", "cancel")]
