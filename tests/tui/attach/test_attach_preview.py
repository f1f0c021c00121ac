"""Attach to a long run: the first frame comes from the newest steps, the rest is folded behind it."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from bench.open_run import write_run
from engine.client import RunClient
from tests.tui.attach.conftest import screen_text, until
from tui.attach_app import AttachApp
from tui.history_fold import PREVIEW_ROWS, HistoryFold

STEPS = 6000  # more than PREVIEW_ROWS: the fold is split


class GatedFold(HistoryFold):
    """The worker's full fold, held until the test opens ``gate``."""

    gate = threading.Event()

    def finish(self, names=None):
        assert self.gate.wait(60), "the test never released the fold"
        return super().finish(names)


class GatedApp(AttachApp):
    def history_fold(self, history):
        return GatedFold(history, self.model.capacity)


def test_first_frame_before_the_full_fold_and_keys_work_meanwhile(tmp_path: Path) -> None:
    run = tmp_path / "long"
    write_run(run, STEPS)
    GatedFold.gate.clear()

    async def scenario() -> None:
        app = GatedApp(lambda: RunClient(run, read_only=True), run, read_only=True)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: f"step {STEPS}/{STEPS}" in screen_text(app), what="the first full frame")
            assert app.model.history_loading and len(app.model.steps) == PREVIEW_ROWS
            await pilot.press("h")  # input is handled while the fold waits
            await until(pilot, lambda: "full history (loading…)" in screen_text(app), what="the loading title")
            await pilot.press("s")
            await until(pilot, lambda: "smoothing" in app.status_text, what="the smoothing key's answer")
            GatedFold.gate.set()
            await until(pilot, lambda: not app.model.history_loading, what="the full fold adopted")
            assert len(app.model.steps) == STEPS and app.model.steps.column(0)[0] == 1
            await until(pilot, lambda: "full history (loading…)" not in screen_text(app)
                        and "full history" in screen_text(app), what="the title without loading")

    try:
        asyncio.run(scenario())
    finally:
        GatedFold.gate.set()
