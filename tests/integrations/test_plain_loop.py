"""A plain PyTorch loop in ``with cockpit(...)``: the controls, a SIGKILL mid-run, and the user's resume.

First process: pause holds the step count for 3 s, checkpoint-now writes
checkpoints/last.pt atomically (named in the events), a setting is refused; then SIGKILL. `runs` reports the
run crashed, with the script as its resume command, and `attach` opens the dashboard on it and says so (it
offers no engine resume: the engine cannot rebuild the script). Second process (the same command): it continues from the
atomic save, reproducing the killed run's losses step for step, until a graceful abort saves and it exits 0.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.run import events as ev
from engine.run.control import requests as rq
from engine.run.control.client import RunClient
from engine.run.rundir import RunDir, liveness
from engine.run.steps import open_record
from tests.integrations.conftest import holds_for, read_events, send, status_step, wait_until
from tests.tui.attach.conftest import screen_text, until
from tui.commands.plot import render
from tui.dashboard.attach_app import AttachApp
from tui.model.run_index import list_runs
from tui.screens.resume import ResumeScreen

pytestmark = pytest.mark.slow

#: Periodic saves far apart: the manual save is the newest when the loop is killed. (Every 50 steps, a save
#: could land in the last second before the kill, which the event log, flushed each second, had not shown:
#: the resumed run then began after every step the killed run's log held.)
#: A step sleeps 25 ms, past the integrations' step-event cadence (engine.app.integrations.core.STEP_EVENT_S, 20 ms):
#: each attempt logs every step, so the steps a resume replays are logged by both (at 10 ms each logged about
#: every other step, each in a phase of its own, and the two could share none).
ARGS = ("--steps", "100000", "--step-s", "0.025", "--save-every", "5000")


def _attached_to_the_crashed_run(run: Path) -> tuple[str, str]:
    """`attach` on the killed run: (its header, its status line) once it says how to resume."""
    async def scenario() -> tuple[str, str]:
        app = AttachApp(lambda: RunClient(run), run)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: "your own command" in app.status_text, 60, "attach saying how to resume")
            await pilot.pause(0.5)
            assert not isinstance(app.screen, ResumeScreen)  # the engine cannot rebuild the user's script
            header, status = screen_text(app).splitlines()[0], app.status_text
            await pilot.press("q")
        return header, status

    return asyncio.run(scenario())


def _losses(events: list[dict]) -> dict[int, float]:
    return {e["step"]: e["loss"] for e in events if e["type"] == "step"}


def test_plain_loop_controls_crash_and_resume(tmp_path: Path, started_scripts) -> None:
    run = tmp_path / "runs" / "plain"
    first = started_scripts("plain_loop.py", str(run), *ARGS, log=tmp_path / "first.out")
    wait_until(lambda: status_step(run) >= 10, 120, "the loop's first steps")

    assert isinstance(send(run, rq.pause()), ev.SettingChanged)
    held = status_step(run)
    holds_for(lambda: status_step(run) == held and RunDir(run).read_status()["state"] == "paused", 3,
              "the paused loop: no step, state paused", 0.2)
    assert isinstance(send(run, rq.resume()), ev.SettingChanged)
    ack = send(run, rq.checkpoint_now())
    assert isinstance(ack, ev.SettingChanged) and ack.new == str(run / "checkpoints" / "last.pt")
    saved_at = [e for e in read_events(run) if e.get("request_id") == ack.request_id and e["type"] == "checkpoint"]
    assert saved_at and saved_at[0]["kind"] == "manual"
    assert isinstance(send(run, rq.set_value("batch_size", 8)), ev.Refused)

    wait_until(lambda: max(_losses(read_events(run)), default=0) > saved_at[0]["step"] + 20, 60,
               "steps after the manual save, in the log")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(10)
    listed = {r.name: r for r in list_runs(run.parent)}["plain"]
    assert listed.state == "crashed" and "plain_loop.py" in listed.resume_command
    header, said = _attached_to_the_crashed_run(run)
    assert "plain · loop/Sequential" in header and "CRASHED" in header, header  # the badge of a dead process
    assert "plain_loop.py" in said, said
    saved_step = torch.load(run / "checkpoints" / "last.pt", weights_only=True)["step"]
    assert saved_step == saved_at[0]["step"]
    killed = read_events(run)
    before = _losses(killed)

    second = started_scripts("plain_loop.py", str(run), *ARGS, log=tmp_path / "second.out")
    wait_until(lambda: status_step(run) > max(before) + 5, 120, "the resumed loop past the killed one")
    # what came after the kill (by time: the resume dropped the killed loop's steps past the save from the record)
    killed_t = max(e.get("t", 0) for e in killed)
    later = [e for e in read_events(run) if e.get("t", 0) > killed_t]
    resumed = [e for e in later if e["type"] == "run_started"]
    assert resumed and resumed[0]["start_step"] == saved_step and resumed[0]["resumed_from"].endswith("last.pt")
    after = _losses(later)
    overlap = sorted(set(before) & set(after))
    assert overlap and overlap[0] == saved_step + 1, (saved_step, overlap[:3])
    assert [after[s] for s in overlap] == [before[s] for s in overlap]  # the same run, bit for bit (CPU)

    assert isinstance(send(run, rq.abort()), ev.SettingChanged)
    assert second.wait(60) == 0
    events = read_events(run)
    final = [e for e in events if e["type"] == "checkpoint" and e["kind"] == "final"]
    assert final and torch.load(final[-1]["path"], weights_only=True)["step"] == events[-1]["steps"]
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "aborted"
    assert liveness(RunDir(run)) == "aborted"
    assert "val_loss" in render([run], "val_loss", 80, 20)
    # the step record: the killed attempt's steps up to its save, then the resumed attempt's, each once
    kept = {step: loss for step, loss in before.items() if step <= saved_step} | \
        _losses([e for e in events if e.get("t", 0) > killed_t])
    steps, losses = open_record(run).window("loss", 0, 10**9)
    assert steps.tolist() == sorted(kept) and losses.tolist() == [np.float32(kept[s]) for s in sorted(kept)]
