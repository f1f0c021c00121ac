"""Run directories made by the previous release (tests/fixtures/runs_v1) attach, list and resume through
engine.core.migrate."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from engine.core import config as cfg
from engine.core import migrate
from engine.run import events as ev
from engine.run.history import read_history
from engine.run.rundir import RunDir
from tests.conftest import read_events, run_cli

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs_v1"


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """A private copy of the fixture runs (resuming appends to them)."""
    shutil.copytree(FIXTURES, tmp_path / "runs")
    return tmp_path / "runs"


@pytest.mark.parametrize("name, task", [("sensorlm_v1", "sensorlm"), ("toy_v1", "toy")])
def test_v1_config_migrates_to_v2_and_migration_is_idempotent(name: str, task: str) -> None:
    raw, _ = cfg.read_toml(FIXTURES / name / "config.toml")
    assert migrate.is_v1_config(raw) and "model" in raw
    new = migrate.config(raw)
    assert new["version"] == migrate.CONFIG_VERSION and "model" not in new and task in new
    assert migrate.config(new) == new
    config = cfg.load_resolved(FIXTURES / name / "config.toml")
    assert config.task.name == task and config.train.abort_drop == raw["train"]["abort_drop_db"]
    assert config.data.path is None  # v1 synthetic data: data.path was not read, so it is not carried over
    # The v1 values land in the task's own section.
    section = config.task_config
    dim = section.model.dim if task == "sensorlm" else section.dim
    assert dim == raw["model"]["dim"] == 8
    # Written back, it is a v2 file that reads to the same config.
    assert cfg.validate(json.loads(config.model_dump_json())) == config


def test_v1_events_read_as_schema_2() -> None:
    events = read_history(FIXTURES / "sensorlm_v1" / "events.jsonl")
    started = next(e for e in events if isinstance(e, ev.RunStarted))
    assert started.capabilities["primary"]["name"] == "psnr_db"  # v1 runs carried none: the task's today
    assert started.config["version"] == 2 and "sensorlm" in started.config
    assert started.budget.predicted and started.budget.source == "analytic"  # typed from the old dict
    evals = [e for e in events if isinstance(e, ev.EvalDone)]
    raw = [json.loads(line) for line in (FIXTURES / "sensorlm_v1" / "events.jsonl").read_text().splitlines()]
    raw_evals = [r for r in raw if r["type"] == "eval"]
    assert len(evals) == len(raw_evals) == 3
    for event, record in zip(evals, raw_evals):
        assert event.primary == "psnr_db" and event.metrics["psnr_db"] == record["psnr_db"]
        assert event.metrics["retrieval_top1"] == record["extra"]["retrieval_top1"]
        assert not hasattr(event, "psnr_db") and not hasattr(event, "extra")


def test_schema_1_eval_without_metrics_migrates() -> None:
    old = {"type": "eval", "t": 1.0, "step": 5, "val_loss": 0.5, "psnr_db": 21.0, "extra": {"acc": 0.9},
           "best": 21.0, "is_best": True}
    event = ev.from_dict(old)
    assert event.metrics == {"val_loss": 0.5, "psnr_db": 21.0, "acc": 0.9} and event.primary == "psnr_db"
    assert migrate.event(migrate.event(old)) == migrate.event(old)


def test_v1_status_migrates(runs: Path) -> None:
    status = RunDir(runs / "toy_v1").read_status()
    assert "best_psnr" not in status and status["best_metric"] == "psnr_db"
    assert status["best"] == json.loads((FIXTURES / "toy_v1" / "status.json").read_text())["best_psnr"]


def test_v1_runs_list(runs: Path) -> None:
    result = run_cli("runs", str(runs), "--json")
    assert result.returncode == 0, result.stderr
    by_name = {r["name"]: r for r in json.loads(result.stdout)}
    assert set(by_name) == {"sensorlm_v1", "toy_v1"}
    for record in by_name.values():
        assert record["state"] == "finished" and record["step"] == 4 and record["best"] is not None
        assert record["best_metric"].startswith("psnr_db")


@pytest.mark.parametrize("name", ["toy_v1", "sensorlm_v1"])
def test_v1_run_resumes_from_its_checkpoint(runs: Path, name: str) -> None:
    before = len(read_events(runs / name))
    result = run_cli("train", "--resume", str(runs / name), "--max-steps", "6", "--headless")
    assert result.returncode == 0, result.stdout + result.stderr
    events = read_events(runs / name)
    new = events[before:]
    started = next(e for e in new if e["type"] == "run_started")
    assert started["start_step"] == 4 and started["resumed_from"].endswith("last.safetensors")
    assert [e["step"] for e in new if e["type"] == "step"] == [5, 6]
    assert new[-1]["type"] == "run_finished" and new[-1]["status"] == "finished" and new[-1]["steps"] == 6
    # The old log is kept and read together with the new one.
    history = read_history(runs / name / "events.jsonl")
    assert [e.step for e in history if isinstance(e, ev.EvalDone)][-1] == 6


def test_v1_run_attaches(runs: Path) -> None:
    """The dashboard opens on the old run (read-only attach) and shows its history with the primary metric."""
    from engine.run.control.client import RunClient
    from tests.tui.attach.conftest import screen_text, until
    from tui.dashboard.attach_app import AttachApp

    run = runs / "toy_v1"

    async def scenario() -> None:
        app = AttachApp(lambda: RunClient(run, read_only=True), run, read_only=True)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.model.step == 4, what="the old run's history")
            await until(pilot, lambda: "PSNR" in screen_text(app), what="its primary metric on screen")
            assert app.model.best_primary() is not None and app.model.primary.name == "psnr_db"
            await pilot.press("q")

    asyncio.run(scenario())
