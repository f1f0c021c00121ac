"""Attach to a long run: the first frame comes from the newest steps, the rest is folded behind it."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from bench.open_run import write_run
from engine.run.control.client import RunClient
from engine.run.history import index as history_index
from tests.tui.attach.conftest import screen_text, until
from tui.dashboard.attach_app import AttachApp
from tui.model.history_fold import PREVIEW_ROWS


class GatedApp(AttachApp):
    """AttachApp whose session worker finishes the full fold only once ``gate`` is open."""

    gate = threading.Event()

    def history_fold(self, history):
        fold = super().history_fold(history)
        finish = fold.finish

        def gated(names=None):
            assert self.gate.wait(60), "the test never released the fold"
            return finish(names)

        fold.finish = gated
        return fold


@pytest.mark.parametrize("steps", [6000, 16_000], ids=["index-free short log", "first open of a long log"])
def test_first_frame_before_the_full_fold_and_keys_work_meanwhile(tmp_path: Path, steps: int) -> None:
    """6,000 steps: the newest 4,096 are folded first. 16,000 (> 4 MiB, no events.index yet): only the newest
    steps are even decoded before the first frame; the worker reads the whole log after it and leaves the index."""
    run = tmp_path / "long"
    write_run(run, steps)
    GatedApp.gate.clear()

    async def scenario() -> None:
        app = GatedApp(lambda: RunClient(run, read_only=True), run, read_only=True)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: f"step {steps}/{steps}" in screen_text(app), what="the first full frame")
            assert app.model.history_loading and len(app.model.steps) == PREVIEW_ROWS
            await pilot.press("h")  # input is handled while the fold waits
            await until(pilot, lambda: "full history (loading…)" in screen_text(app), what="the loading title")
            await pilot.press("s")
            await until(pilot, lambda: "smoothing" in app.status_text, what="the smoothing key's answer")
            GatedApp.gate.set()
            await until(pilot, lambda: not app.model.history_loading, what="the full fold adopted")
            assert len(app.model.steps) == steps and app.model.steps.column(0)[0] == 1
            await until(pilot, lambda: "full history (loading…)" not in screen_text(app)
                        and "full history" in screen_text(app), what="the title without loading")

    try:
        asyncio.run(scenario())
    finally:
        GatedApp.gate.set()
    if steps > 10_000:
        for thread in threading.enumerate():
            if thread.name == "events-index":
                thread.join(30)
        assert history_index.path_for(run / "events.jsonl").exists()
