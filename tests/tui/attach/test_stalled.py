"""A stopped engine is stalled, not dead: a real engine SIGSTOPped with a dashboard attached, then SIGCONTed.

Before, a heartbeat older than five seconds read as a crash whatever the process was doing: the attached
dashboard offered to resume a run "whose engine died (no heartbeat, process gone)" and `runs` said crashed,
though the pid was there in state T. ``liveness`` now tells a live process with a stale heartbeat apart:
stalled, with how long and psutil's state of the process, everywhere a viewer shows the run's state; and live
again as soon as it beats.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest

from engine.run import rundir
from engine.run.control.client import RunClient
from engine.run.rundir import STALE_AFTER_S, RunDir
from tests.tui.attach.conftest import screen_text, until, wait_for_step, wait_until
from tui.commands.runs import table
from tui.dashboard.attach_app import AttachApp
from tui.model.run_index import list_runs

pytestmark = pytest.mark.slow

SIZE = (120, 40)


def _header(app) -> str:
    """The state badge the dashboard shows (under any modal on top of it)."""
    return str(app.dashboard.query_one("#header-badge").render())


def test_a_stopped_engine_is_stalled_not_crashed_and_live_again_once_continued(tmp_path: Path, engines) -> None:
    run = tmp_path / "r"
    proc = engines(run)
    wait_for_step(run, 5)

    async def scenario() -> None:
        app = AttachApp(lambda: RunClient(run), run)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: "RUNNING" in _header(app), what="RUNNING in the header")
            os.kill(proc.pid, signal.SIGSTOP)
            try:
                await until(pilot, lambda: "STALLED" in _header(app), timeout=STALE_AFTER_S + 15,
                            what="STALLED in the header")
                alive = rundir.probe(RunDir(run))
                assert (alive.state, alive.process, alive.pid) == ("stalled", "stopped", proc.pid)
                assert alive.silent_s() >= STALE_AFTER_S
                assert f"kill -CONT {proc.pid} resumes it" in app.status_text
                assert "CRASHED" not in screen_text(app) and "died" not in screen_text(app)
                assert len(app.screen_stack) == 1, "no offer to resume a run whose engine is there"
                await until(pilot, lambda: any(f"STALLED {s}s" in _header(app) for s in range(7, 60)),
                            what="the badge counting the silence")
                listed = table(list_runs(tmp_path), width=120).splitlines()[1]
                assert "stalled " in listed and "(stopped)" in listed and "crashed" not in listed, listed
                record = list_runs(tmp_path)[0].to_json()
                assert (record["state"], record["process_state"]) == ("stalled", "stopped")
                json.dumps(record, allow_nan=False)
            finally:
                os.kill(proc.pid, signal.SIGCONT)
            await until(pilot, lambda: "RUNNING" in _header(app), timeout=15, what="RUNNING again")
            log = app.dashboard.query_one("#log")
            assert any("the engine beats again" in line for line in log.plain)
            await pilot.press("q")
            await until(pilot, lambda: app.return_code is not None, what="detach")

    asyncio.run(scenario())
    assert rundir.probe(RunDir(run)).state == "live"
    step = wait_for_step(run, 1)
    wait_until(lambda: (RunDir(run).read_status() or {}).get("step", 0) > step, 30, "training to go on")
