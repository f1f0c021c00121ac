"""Attaching to a crashed run: the viewer says so with the resume command, and resumes it on request."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from pathlib import Path

import pytest

from engine.run.control.client import RunClient
from engine.run.rundir import RunDir, pid_alive
from tests.conftest import read_events
from tests.tui.attach.conftest import screen_text, until, wait_until
from tui.dashboard.attach_app import AttachApp
from tui.screens.resume import ResumeScreen

pytestmark = pytest.mark.slow

SIZE = (120, 40)


def _screen_step(app) -> int:
    found = re.search(r"step (\d+)/100000", screen_text(app))
    return int(found.group(1)) if found else -1


def test_crashed_run_is_offered_for_resume_and_the_viewer_follows_the_new_engine(tmp_path: Path, engines) -> None:
    run = tmp_path / "r"
    proc = engines(run, "--checkpoint-every", "10")
    wait_until(lambda: (run / "checkpoints" / "last.safetensors").exists() and
               (RunDir(run).read_status() or {}).get("step", 0) >= 15, 60, "a checkpoint and step 15")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    command = f"sensorlm-tui train --resume {run}"

    async def scenario() -> None:
        steer = AttachApp(lambda: RunClient(run), run)
        watch = AttachApp(lambda: RunClient(run, read_only=True), run, read_only=True)
        async with steer.run_test(size=SIZE) as ps, watch.run_test(size=SIZE) as pw:
            await until(ps, lambda: isinstance(steer.screen, ResumeScreen) and "its engine died" in screen_text(steer),
                        what="the resume offer")
            assert "sensorlm-tui train --resume" in screen_text(steer)  # the path may wrap inside the dialog
            assert command in steer.status_text
            # The read-only viewer is not offered anything, but it is told the engine is gone and how to resume.
            await until(pw, lambda: command in watch.status_text, what="resume command on the read-only viewer")
            assert "crashed" in watch.status_text and len(watch.screen_stack) == 1

            crashed_at = steer.model.step
            await ps.press("r")
            await until(ps, lambda: "resumed: engine pid" in steer.status_text, timeout=90,
                        what="the resumed engine up")
            await until(ps, lambda: _screen_step(steer) > crashed_at + 5, timeout=60,
                        what="steps past the crash on screen")
            await until(ps, lambda: "RUNNING" in screen_text(steer).splitlines()[0], what="RUNNING in the header")
            # The run's step record holds both engines' steps: the old engine's first step is still there.
            assert steer.model.steps.first_step == 1 and steer.model.steps.last_step > crashed_at + 5
            # The read-only viewer follows the same run: it sees the new steps too.
            await until(pw, lambda: _screen_step(watch) > crashed_at + 5, timeout=30,
                        what="the read-only viewer seeing the resumed run")

    try:
        asyncio.run(scenario())
        starts = [e for e in read_events(run) if e["type"] == "run_started"]
        assert len(starts) == 2 and starts[1]["resumed_from"]
    finally:
        pid = (RunDir(run).read_status() or {}).get("pid")
        if pid and pid != proc.pid and pid_alive(pid):
            os.kill(pid, signal.SIGTERM)
            wait_until(lambda: not pid_alive(pid), 30, "the resumed engine to stop")


def test_attaching_to_a_finished_run_shows_its_final_state(tmp_path: Path, engines) -> None:
    run = tmp_path / "done"
    assert engines(run, "--eval-every", "10", max_steps=20).wait(120) == 0

    async def scenario() -> None:
        app = AttachApp(lambda: RunClient(run), run)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: "FINISHED" in screen_text(app).splitlines()[0], what="FINISHED in the header")
            await until(pilot, lambda: "finished at step 20" in app.status_text, what="the final summary")
            assert "q quits" in app.status_text
            await until(pilot, lambda: "step 20/20" in screen_text(app), what="the last step in the progress panel")
            await pilot.press("r")  # nothing to resume, and no offer was made
            await until(pilot, lambda: "nothing to resume" in app.status_text, what="r refused")
            assert len(app.screen_stack) == 1
            await pilot.press("space")
            await until(pilot, lambda: "the run has ended" in app.status_text, what="controls refused after the end")
            await pilot.press("q")  # an ended run quits at once, with its exit code
            await until(pilot, lambda: app.return_code is not None, what="exit")
        assert app.return_code == 0 and "finished at step 20" in app.summary

    asyncio.run(scenario())
