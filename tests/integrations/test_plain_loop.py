"""A plain PyTorch loop in ``with cockpit(...)``: the controls, a SIGKILL mid-run, and the user's resume.

First process: `attach` opens the dashboard on it, pause holds the step count for 3 s, checkpoint-now writes
checkpoints/last.pt atomically (named in the events), a setting is refused; then SIGKILL. `runs` reports the
run crashed, with the script as its resume command. Second process (the same command): it continues from the
atomic save, reproducing the killed run's losses step for step, until a graceful abort saves and it exits 0.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from pathlib import Path

import torch

from engine.run import events as ev
from engine.run.control import requests as rq
from engine.run.control.client import RunClient
from engine.run.rundir import RunDir, liveness
from tests.integrations.conftest import read_events, send, status_step, wait_until
from tests.tui.attach.conftest import screen_text, until
from tui.commands.plot import render
from tui.dashboard.app import DashboardApp
from tui.model.run_index import list_runs

ARGS = ("--steps", "100000", "--step-s", "0.01", "--save-every", "50")


def _header(run: Path) -> str:
    async def scenario() -> str:
        app = DashboardApp(lambda: RunClient(run))
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: re.search(r"step \d+/100000", screen_text(app)), 60, "the dashboard's steps")
            text = screen_text(app).splitlines()[0]
            await pilot.press("q")
        return text

    return asyncio.run(scenario())


def _losses(events: list[dict]) -> dict[int, float]:
    return {e["step"]: e["loss"] for e in events if e["type"] == "step"}


def test_plain_loop_controls_crash_and_resume(tmp_path: Path, started_scripts) -> None:
    run = tmp_path / "runs" / "plain"
    first = started_scripts("plain_loop.py", str(run), *ARGS, log=tmp_path / "first.out")
    wait_until(lambda: status_step(run) >= 10, 120, "the loop's first steps")
    assert "plain · loop/Sequential" in _header(run)

    assert isinstance(send(run, rq.pause()), ev.SettingChanged)
    held = status_step(run)
    time.sleep(3)
    assert status_step(run) == held and RunDir(run).read_status()["state"] == "paused"
    assert isinstance(send(run, rq.resume()), ev.SettingChanged)
    ack = send(run, rq.checkpoint_now())
    assert isinstance(ack, ev.SettingChanged) and ack.new == str(run / "checkpoints" / "last.pt")
    saved_at = [e for e in read_events(run) if e.get("request_id") == ack.request_id and e["type"] == "checkpoint"]
    assert saved_at and saved_at[0]["kind"] == "manual"
    assert isinstance(send(run, rq.set_value("batch_size", 8)), ev.Refused)

    wait_until(lambda: status_step(run) > saved_at[0]["step"] + 20, 60, "steps after the manual save")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(10)
    listed = {r.name: r for r in list_runs(run.parent)}["plain"]
    assert listed.state == "crashed" and "plain_loop.py" in listed.resume_command
    saved_step = torch.load(run / "checkpoints" / "last.pt", weights_only=True)["step"]
    killed = read_events(run)
    before = _losses(killed)

    second = started_scripts("plain_loop.py", str(run), *ARGS, log=tmp_path / "second.out")
    wait_until(lambda: status_step(run) > max(before) + 5, 120, "the resumed loop past the killed one")
    resumed = [e for e in read_events(run)[len(killed):] if e["type"] == "run_started"]
    assert resumed and resumed[0]["start_step"] == saved_step and resumed[0]["resumed_from"].endswith("last.pt")
    after = _losses(read_events(run)[len(killed):])
    overlap = sorted(set(before) & set(after))
    assert overlap and overlap[0] == saved_step + 1
    assert [after[s] for s in overlap] == [before[s] for s in overlap]  # the same run, bit for bit (CPU)

    assert isinstance(send(run, rq.abort()), ev.SettingChanged)
    assert second.wait(60) == 0
    events = read_events(run)
    final = [e for e in events if e["type"] == "checkpoint" and e["kind"] == "final"]
    assert final and torch.load(final[-1]["path"], weights_only=True)["step"] == events[-1]["steps"]
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "aborted"
    assert liveness(RunDir(run)) == "aborted"
    assert "val_loss" in render([run], "val_loss", 80, 20)
