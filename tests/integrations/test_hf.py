"""A real transformers.Trainer run (a tiny random Llama from a config, CPU, no hub) with the cockpit's callback.

One process, in sequence: `runs` lists it live, `attach` opens the dashboard on it (Pilot, the app `attach`
runs), pause holds the step count for 3 s and resume continues, checkpoint-now makes the Trainer write its
own checkpoint-N directory (named in the events), a setting is refused, a graceful abort saves and the script
exits 0, `plot` draws the loss and the evaluations.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from engine.run import events as ev
from engine.run.control import requests as rq
from engine.run.control.client import RunClient
from engine.run.rundir import RunDir, liveness
from engine.run.steps import open_record
from tests.integrations.conftest import holds_for, kinds, log_steps, read_events, send, status_step, wait_until
from tests.tui.attach.conftest import screen_text, until
from tui.commands.plot import render
from tui.dashboard.app import DashboardApp
from tui.model.run_index import list_runs

pytestmark = pytest.mark.slow

#: The memory panel with a measured and a predicted peak (the traced step).
MEMORY = r"meas [\d.]+( [KM]iB)? · pred [\d.]+ [KM]iB"


def _dashboard_shows(run: Path) -> str:
    """Open the dashboard `attach` opens on the live run; its screen once the history and a live step arrived."""
    async def scenario() -> str:
        app = DashboardApp(lambda: RunClient(run))
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: re.search(r"step \d+/100000", screen_text(app)) and
                        re.search(MEMORY, screen_text(app)), 60, "the dashboard showing steps and memory")
            text = screen_text(app)
            await pilot.press("q")
        return text

    return asyncio.run(scenario())


def test_hf_trainer_run_is_listed_attached_steered_and_plotted(tmp_path: Path, started_scripts) -> None:
    run = tmp_path / "runs" / "hf"
    proc = started_scripts("hf_run.py", str(run), "--steps", "100000", "--step-s", "0.05", log=tmp_path / "hf.out")
    wait_until(lambda: status_step(run) >= 3, 180, "the Trainer's first steps")

    listed = {r.name: r for r in list_runs(run.parent)}["hf"]
    assert listed.state == "live" and listed.step >= 3
    screen = _dashboard_shows(run)
    assert "hf · transformers/LlamaForCausalLM" in screen.splitlines()[0], screen
    assert re.search(MEMORY, screen), screen

    ack = send(run, rq.pause())
    assert isinstance(ack, ev.SettingChanged) and ack.new == "paused"
    held = status_step(run)
    holds_for(lambda: status_step(run) == held and RunDir(run).read_status()["state"] == "paused", 3,
              "the paused Trainer: no step, state paused", 0.2)
    assert max(e["step"] for e in kinds(run, "step")) <= held
    assert isinstance(send(run, rq.resume()), ev.SettingChanged)
    wait_until(lambda: status_step(run) > held + 2, 60, "steps after resume")

    ack = send(run, rq.checkpoint_now())
    assert isinstance(ack, ev.SettingChanged) and ack.name == "checkpoint"
    written = Path(ack.new)
    assert written.name.startswith("checkpoint-") and written.parent == run / "hf"
    assert (written / "trainer_state.json").is_file()  # the Trainer's own checkpoint directory
    assert [e for e in kinds(run, "checkpoint") if e["request_id"] == ack.request_id][0]["kind"] == "manual"

    refused = send(run, rq.set_value("lr", 0.1))
    assert isinstance(refused, ev.Refused) and "transformers Trainer owns" in refused.why

    started = kinds(run, "run_started")[0]
    measured = [e for e in kinds(run, "memory") if e["peak"]]
    assert started["budget"]["source"] == "trace" and measured  # the example_batch handed over: traced
    assert measured[0]["peak"] <= started["budget"]["predicted"] <= 1.10 * measured[0]["peak"]

    wait_until(lambda: kinds(run, "eval"), 120, "the first evaluation (every 20 steps)")
    assert isinstance(send(run, rq.abort()), ev.SettingChanged)
    assert proc.wait(120) == 0
    final = [e for e in kinds(run, "checkpoint") if e["kind"] == "final"]
    assert len(final) == 1 and Path(final[0]["path"]).is_dir()
    finished = read_events(run)[-1]
    assert finished["type"] == "run_finished" and finished["status"] == "aborted" and finished["exit_code"] == 0
    assert liveness(RunDir(run)) == "aborted"
    recorded, lines = open_record(run).steps().tolist(), log_steps(run)  # the log: a step line a second
    assert set(lines) <= set(recorded) and lines[0] == recorded[0], (lines, recorded)  # every logged step

    assert "val_loss" in render([run], "val_loss", 80, 20)
    assert "loss" in render([run], "loss", 80, 20)
