"""A real Lightning 2.x run (a tiny LightningModule on CPU) with the cockpit's callback, steered through its socket.

One process, every acceptance point in sequence: `runs` lists it live with its best val_loss, ModelCheckpoint's
files are named in the events, pause holds the step count for 3 s and resume continues, checkpoint-now writes
Lightning's own file, a setting is refused with the reason the tune modal shows, the memory prediction of the
traced training_step is within the budget's contract, a graceful abort saves and the script exits 0, `plot` draws it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.run import events as ev
from engine.run.control import requests as rq
from engine.run.rundir import RunDir, liveness
from engine.run.steps import open_record
from tests.integrations.conftest import holds_for, kinds, log_steps, read_events, send, status_step, wait_until
from tui.commands.plot import render
from tui.model.run_index import list_runs

pytestmark = pytest.mark.slow


def ack_step(run: Path) -> int:
    """The step the abort's acknowledgement landed on."""
    return [e for e in kinds(run, "setting") if e["new"] == "aborting"][-1]["step"]


def _last_step(run: Path) -> int:
    steps = kinds(run, "step")
    return steps[-1]["step"] if steps else 0


def test_lightning_run_is_listed_steered_and_plotted(tmp_path: Path, started_scripts) -> None:
    run = tmp_path / "runs" / "light"
    proc = started_scripts("lightning_run.py", str(run), "--steps", "100000", "--step-s", "0.02",
                           "--val-every", "20", log=tmp_path / "light.out")
    wait_until(lambda: kinds(run, "checkpoint"), 180, "ModelCheckpoint's first file in the events")

    listed = {r.name: r for r in list_runs(run.parent)}["light"]
    assert listed.state == "live" and listed.step >= 20 and listed.best_metric == "val_loss"
    assert listed.best is not None and "lightning_run.py" in listed.resume_command
    named = kinds(run, "checkpoint")[0]
    assert Path(named["path"]).is_file() and named["path"].endswith(".ckpt") and named["kind"] in ("best", "last")

    ack = send(run, rq.pause())
    assert isinstance(ack, ev.SettingChanged) and ack.new == "paused"
    held, logged = status_step(run), _last_step(run)
    assert held == ack.step and logged <= held  # a waiting control gets its step logged (unless it came mid-check)
    holds_for(lambda: status_step(run) == held and _last_step(run) == logged, 3,
              "the paused Lightning run: no step, none logged", 0.2)
    assert RunDir(run).read_status()["state"] == "paused"
    assert isinstance(send(run, rq.resume()), ev.SettingChanged)
    wait_until(lambda: status_step(run) > held + 3, 60, "steps after resume")

    ack = send(run, rq.checkpoint_now())
    assert isinstance(ack, ev.SettingChanged) and ack.name == "checkpoint"
    manual = Path(ack.new)
    assert manual.is_file() and manual.name.startswith("manual-step=") and manual.parent == run / "checkpoints"
    saved = [e for e in kinds(run, "checkpoint") if e["request_id"] == ack.request_id]
    assert saved and saved[0]["path"] == str(manual) and saved[0]["kind"] == "manual" and saved[0]["bytes"] > 0

    refused = send(run, rq.set_value("batch_size", 64))
    assert isinstance(refused, ev.Refused) and "Lightning owns" in refused.why
    started = kinds(run, "run_started")[0]
    assert started["task"] == "lightning" and "Lightning owns" in started["capabilities"]["settings_locked"]

    budget = started["budget"]
    measured = [e for e in kinds(run, "memory") if e["peak"]]
    assert budget["source"] == "trace" and measured
    assert measured[0]["peak"] <= budget["predicted"] <= 1.10 * measured[0]["peak"]  # never under, at most +10 %

    assert isinstance(send(run, rq.abort()), ev.SettingChanged)
    assert proc.wait(120) == 0
    final = [e for e in kinds(run, "checkpoint") if e["kind"] == "final"]
    assert len(final) == 1 and Path(final[0]["path"]).name.startswith("aborted-step=")
    assert Path(final[0]["path"]).is_file() and final[0]["step"] >= ack_step(run)
    finished = read_events(run)[-1]
    assert finished["type"] == "run_finished" and finished["status"] == "aborted" and finished["exit_code"] == 0
    assert liveness(RunDir(run)) == "aborted"
    assert not (run / "control.sock").exists()
    recorded, lines = open_record(run).steps().tolist(), log_steps(run)  # the log: a step line a second
    assert set(lines) <= set(recorded) and lines[0] == recorded[0], (lines, recorded)  # every logged step

    chart = render([run], None, 80, 20)
    assert "val_loss" in chart and "step" in chart
    assert "train_mse" in render([run], "train_mse", 80, 20)  # what training_step logged with self.log
