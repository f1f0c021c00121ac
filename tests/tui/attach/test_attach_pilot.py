"""A Pilot-driven dashboard attached (RunClient) to a real engine process: history, live steps, acked controls."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from engine.run.control.client import RunClient
from engine.run.rundir import RunDir, pid_alive
from tests.conftest import log_events
from tests.tui.attach.conftest import screen_text, status_step, until, wait_for_step, wait_until
from tui.dashboard.app import DashboardApp

pytestmark = pytest.mark.slow

SIZE = (120, 40)


def _screen_step(app) -> int:
    """The step the progress panel shows ("step N/100000"), or -1."""
    found = re.search(r"step (\d+)/100000", screen_text(app))
    return int(found.group(1)) if found else -1


def _header(app) -> str:
    return screen_text(app).splitlines()[0]


def test_attach_shows_history_then_live_and_controls_round_trip(tmp_path: Path, engines) -> None:
    run = tmp_path / "r"
    proc = engines(run)
    opened_at = wait_for_step(run, 30)

    async def scenario() -> None:
        app = DashboardApp(lambda: RunClient(run))
        async with app.run_test(size=SIZE) as pilot:
            # History: every step since 1 came from the run's step record, not only what arrived after we opened.
            await until(pilot, lambda: app.model.step_count >= opened_at, what="history replayed")
            assert app.model.series.from_record and app.model.steps.first_step == 1
            # Live: the screen keeps advancing past the step the run was at when we attached.
            await until(pilot, lambda: _screen_step(app) > opened_at + 10, what="live steps on screen")

            await pilot.press("space")
            await until(pilot, lambda: "PAUSED" in _header(app), what="PAUSED in the header")
            await until(pilot, lambda: "pause: done" in app.status_text, what="the pause ack")
            wait_until(lambda: RunDir(run).read_status()["state"] == "paused", 5, "status.json to say paused")
            # The engine paused after the step its pause event names; the dashboard reads steps from the record on
            # its own tick, so it reaches that step (and no further) shortly after the ack.
            (paused_at,) = [e["step"] for e in log_events(run) if e["type"] == "state" and e["state"] == "paused"]
            await until(pilot, lambda: app.model.step == paused_at and _screen_step(app) == paused_at,
                        what=f"step {paused_at}, the paused step, on the model and on screen")
            await pilot.pause(1.5)  # paused means no new steps, on screen or in the log
            assert app.model.step == paused_at and _screen_step(app) == paused_at

            await pilot.press("space")
            await until(pilot, lambda: "resume: done" in screen_text(app), what="resume ack on screen")
            await until(pilot, lambda: "RUNNING" in _header(app), what="RUNNING in the header")

            await pilot.press("c")
            await until(pilot, lambda: "checkpoint now: done" in screen_text(app), what="checkpoint ack on screen")
            log = app.dashboard.query_one("#log")
            await until(pilot, lambda: any("checkpoint (manual)" in line for line in log.plain),
                        what="the manual checkpoint in the log panel")
            assert (run / "checkpoints" / "last.safetensors").is_file()

            # Tune through the channel: the engine predicts the change (a dry run), then applies it.
            await pilot.press("t")
            await until(pilot, lambda: app.screen.query("#tune-grad_accum"), what="tune modal")
            app.screen.query_one("#tune-grad_accum").value = "2"
            await until(pilot, lambda: ("grad_accum", 2) in app.screen.answers, what="the engine's prediction")
            assert type(app.screen.answers[("grad_accum", 2)]).__name__ == "Prediction"
            await pilot.press("enter")
            await until(pilot, lambda: "grad_accum" in screen_text(app) and "applied" in screen_text(app),
                        what="applied tune on screen")
            await pilot.press("escape")

            # q on a live process-mode run detaches at once; detaching leaves the engine training.
            assert "q detach" in screen_text(app)
            await pilot.press("q")
            await until(pilot, lambda: app.return_code is not None, what="app exit after detach")
        assert app.return_code == 0
        assert f"sensorlm-tui attach {run}" in app.summary

    asyncio.run(scenario())
    before = status_step(run)
    wait_for_step(run, before + 5)  # training goes on without any viewer
    assert proc.poll() is None and pid_alive(proc.pid)


def test_two_viewers_one_read_only(tmp_path: Path, engines) -> None:
    run = tmp_path / "r"
    engines(run)
    wait_for_step(run, 10)

    async def scenario() -> None:
        steer = DashboardApp(lambda: RunClient(run))
        watch = DashboardApp(lambda: RunClient(run, read_only=True), read_only=True)
        async with steer.run_test(size=SIZE) as ps, watch.run_test(size=SIZE) as pw:
            await until(pw, lambda: _screen_step(watch) > 10 and _screen_step(steer) > 10, what="both viewers live")
            assert "read-only" in _header(watch) and "read-only" not in _header(steer)

            # Every control key: nothing is sent, and the status line says which control and why.
            for key, what in (("space", "pause/resume"), ("c", "checkpoint"), ("a", "abort")):
                watch.say("")
                await pw.press(key)
                await until(pw, lambda what=what: watch.status_text.startswith(f"{what}: read-only viewer"),
                            what=f"read-only notice for {key}")
                assert "controls are disabled" in watch.status_text
                assert len(watch.screen_stack) == 1  # no abort modal opened
            # Not paused or aborted by any of them (a periodic checkpoint may be in progress).
            assert RunDir(run).read_status()["state"] in ("running", "checkpointing")
            # Tune opens read-only: the engine answers its dry run, and nothing can be applied.
            await pw.press("t")
            await until(pw, lambda: watch.screen.query("#tune-batch_size"), what="read-only tune modal")
            watch.screen.query_one("#tune-batch_size").value = "3"
            await until(pw, lambda: ("batch_size", 3) in watch.screen.answers, what="a prediction for a viewer")
            assert type(watch.screen.answers[("batch_size", 3)]).__name__ == "Prediction"
            await pw.press("ctrl+s")
            assert "nothing can be applied" in str(watch.screen.query_one("#tune-results").render())
            await pw.press("escape")

            await ps.press("space")
            await until(ps, lambda: "PAUSED" in _header(steer), what="PAUSED on the steering viewer")
            await until(pw, lambda: "PAUSED" in _header(watch), what="PAUSED on the read-only viewer")
            await ps.press("space")
            await until(pw, lambda: "RUNNING" in _header(watch), what="RUNNING again on the read-only viewer")

    asyncio.run(scenario())
