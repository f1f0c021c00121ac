"""The help and the tune modal at 80×24, 100×30 and 120×40: every key and every line can be read, on screen or by
scrolling with the keys, and nothing is cut at an edge."""

from __future__ import annotations

import contextlib

import pytest

from tests.tui.screens import SIZES
from tests.tui.tui_helpers import dialog_rows, make, on_screen, opened, pilot_test, wait_for
from tui.screens.help import HELP, RULE

IDS = [f"{w}x{h}" for w, h in SIZES]


def _flat(rows: list[str]) -> str:
    return " ".join(" ".join(rows).split())


@contextlib.asynccontextmanager
async def _modal(size: tuple[int, int], key: str, screen: str):
    """The demo dashboard at ``size`` with the modal ``key`` opens on top."""
    app, _ = make()
    async with opened(app, size=size) as pilot:
        await pilot.press(key)
        await on_screen(pilot, screen)
        yield app, pilot


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES, ids=IDS)
@pilot_test
async def test_every_key_of_the_help_can_be_read(size):
    async with _modal(size, "question_mark", "HelpScreen") as (app, pilot):
        await pilot.pause(0.2)
        keys = app.screen.query_one("#help-keys")
        views = []
        for _ in range(40):  # ↓ a row at a time until the list is at its end: every key whole in some view
            rows = dialog_rows(app, "#help-dialog")
            views.append(_flat(rows))
            assert _flat([f"sensorlm-tui keys · {RULE}"]) in views[-1] and "esc / ? close" in views[-1], rows
            if keys.scroll_y >= keys.max_scroll_y:
                break
            at = keys.scroll_y
            await pilot.press("down")
            await wait_for(pilot, lambda at=at: keys.scroll_y > at, "the list scrolled")
        missing = [key for key, line in HELP if not any(_flat([f"{key} {line}"]) in view for view in views)]
        assert not missing, f"keys never shown whole at {size}: {missing}"
        if keys.max_scroll_y:  # End and Home reach both ends; PgDn moves a page
            await pilot.press("home", "pagedown")
            await wait_for(pilot, lambda: keys.scroll_y > 1, "a page down")
            await pilot.press("end")
            await wait_for(pilot, lambda: keys.scroll_y == keys.max_scroll_y, "the end")


@pytest.mark.parametrize("size", SIZES, ids=IDS)
@pilot_test
async def test_the_tune_modal_with_an_error_fixed_shows_every_line_whole(size):
    async with _modal(size, "t", "TuneScreen") as (app, pilot):
        tune = app.screen
        tune.query_one("#tune-lr").value = "1e308"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: "fix first" in _flat(dialog_rows(app, "#tune-dialog")), "the error")
        tune.query_one("#tune-lr").value = "0.001"
        tune.query_one("#tune-batch_size").value = "64"
        await wait_for(pilot, lambda: "asking" not in str(tune.query_one("#tune-estimate").render()) and
                       "lr → 0.001" in str(tune.query_one("#tune-estimate").render()), "the engine's verdicts")
        await pilot.pause(0.2)
        dialog = tune.query_one("#tune-dialog")
        dialog.scroll_end(animate=False)  # a short terminal: the dialog scrolls to its last line
        await pilot.pause(0.2)
        text = _flat(dialog_rows(app, "#tune-dialog"))
        assert "fix first" not in text and "out of range" not in text, text
        estimate = str(tune.query_one("#tune-estimate").render())
        for line in estimate.splitlines():
            assert _flat([line]) in text, f"{line!r} not whole in {text!r}"
        assert "enter apply · esc close" in text
        dialog.scroll_home(animate=False)
        await pilot.pause(0.2)
        top = _flat(dialog_rows(app, "#tune-dialog"))
        for label, value in (("batch size 1..1000000", "64"), ("learning rate >0..10", "0.001")):
            assert f"{label} {value}" in top, top
