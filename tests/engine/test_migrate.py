"""Run directories made by earlier releases (tests/fixtures/runs_v1: layout 1, runs_v2: layout 2) attach, list
and resume through engine.core.migrate; an old key in a user's file or flag is read under its new name."""

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
from tests.conftest import read_events, run_cli, run_forked

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs_v1"
V2 = Path(__file__).resolve().parents[1] / "fixtures" / "runs_v2" / "toy_v2"


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """A private copy of the fixture runs (resuming appends to them)."""
    shutil.copytree(FIXTURES, tmp_path / "runs")
    return tmp_path / "runs"


@pytest.mark.parametrize("name, task", [("sensorlm_v1", "sensorlm"), ("toy_v1", "toy")])
def test_v1_config_migrates_to_the_current_layout_and_migration_is_idempotent(name: str, task: str) -> None:
    raw, _ = cfg.read_toml(FIXTURES / name / "config.toml")
    assert migrate.is_v1_config(raw) and "model" in raw
    new = migrate.config(raw)
    assert new["version"] == migrate.CONFIG_VERSION and "model" not in new and task in new
    assert migrate.config(new) == new
    config = cfg.load_resolved(FIXTURES / name / "config.toml")
    assert config.task.name == task and config.policies.abort_drop == raw["train"]["abort_drop_db"]
    assert config.data.path is None  # v1 synthetic data: data.path was not read, so it is not carried over
    # The v1 values land in the task's own section.
    section = config.task_config
    dim = section.model.dim if task == "sensorlm" else section.dim
    assert dim == raw["model"]["dim"] == 8
    # Written back, it is a current file that reads to the same config.
    assert cfg.validate(json.loads(config.model_dump_json())) == config


def test_v1_events_read_as_schema_2() -> None:
    events = read_history(FIXTURES / "sensorlm_v1" / "events.jsonl")
    started = next(e for e in events if isinstance(e, ev.RunStarted))
    assert started.capabilities["primary"]["name"] == "psnr_db"  # v1 runs carried none: the task's today
    assert started.config["version"] == migrate.CONFIG_VERSION and "sensorlm" in started.config
    assert started.config["policies"]["abort_drop"] == 1.5 and "abort_drop" not in started.config["train"]
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


@pytest.mark.slow
@pytest.mark.parametrize("name", ["toy_v1", "sensorlm_v1"])
def test_v1_run_resumes_from_its_checkpoint(forks, runs: Path, name: str) -> None:
    before = len(read_events(runs / name))
    result = run_forked(forks, "train", "--resume", str(runs / name), "--max-steps", "6", "--headless")
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


# ---------------------------------------------------------------------------------------------- layout 2 → 3
#: What tests/fixtures/runs_v2/toy_v2 was made with, away from the defaults, each in v2's one [train] table.
V2_SETTINGS = {"optimizer.lr": 0.002, "schedule.kind": "constant", "schedule.warmup_frac": 0.25,
               "policies.abort_patience": 3, "runtime.data_workers": 0, "runtime.threads": 1, "evaluation.every": 2}


def _at(config, dotted: str):
    for part in dotted.split("."):
        config = config[part] if isinstance(config, dict) else getattr(config, part)
    return config


def test_v2_config_moves_its_train_keys_to_their_sections() -> None:
    raw, _ = cfg.read_toml(V2 / "config.toml")
    assert raw["version"] == 2 and raw["train"]["lr"] == 0.002 and "optimizer" not in raw
    moves: list = []
    new = migrate.config(raw, moves)
    assert new["version"] == migrate.CONFIG_VERSION == 3 and migrate.config(new) == new  # idempotent
    assert set(new["train"]) == set(cfg.RunConfig.model_fields["train"].annotation.model_fields)
    assert ("train.eval_every", "evaluation.every") in moves and ("train.schedule", "schedule.kind") in moves
    assert len(moves) == len(migrate.LAYOUT_3) == 33  # 41 fields, 8 of which stay in [train]
    config = cfg.load_resolved(V2 / "config.toml")
    assert {path: _at(config, path) for path in V2_SETTINGS} == V2_SETTINGS


@pytest.mark.slow
def test_a_v2_run_resumes_with_its_settings_and_reads_as_the_current_layout(forks, tmp_path: Path) -> None:
    run = tmp_path / "toy_v2"
    shutil.copytree(V2, run)
    before = len(read_events(run))
    result = run_forked(forks, "train", "--resume", str(run), "--max-steps", "6", "--headless",
                        "--set", "train.abort_patience=0")  # an old key beside --resume: read under its new name
    assert result.returncode == 0, result.stdout + result.stderr
    new = read_events(run)[before:]
    started = next(e for e in new if e["type"] == "run_started")
    assert started["start_step"] == 4 and started["config"]["version"] == 3
    kept = {**V2_SETTINGS, "policies.abort_patience": 0}
    assert {path: _at(started["config"], path) for path in kept} == kept  # the checkpoint's v2 config, the flag
    lr = pytest.approx(0.002)  # constant LR (the step record keeps it in float32)
    assert [(e["step"], e["lr"]) for e in new if e["type"] == "step"] == [(5, lr), (6, lr)]
    old_start = next(e for e in read_history(run / "events.jsonl") if isinstance(e, ev.RunStarted))
    assert old_start.config["optimizer"]["lr"] == 0.002 and "lr" not in old_start.config["train"]  # viewers: one layout
    notes = [line for line in result.stdout.splitlines() if "config layout 3" in line]
    assert len(notes) == 1 and "--set: read under config layout 3's names (train.abort_patience → " \
        "policies.abort_patience)" in notes[0], result.stdout  # the flag's note; the run's own files: quietly
    # One step record, the old run's steps then the resumed ones: every viewer opens steps/ as it is ("record").
    from sensorlm_tui.steps import read_steps
    from tui.model import step_open

    logged = {e["step"]: e["loss"] for e in read_events(run) if e["type"] == "step"}
    columns = read_steps(run)
    assert step_open.plan(run) == "record" and columns["step"].tolist() == [1, 2, 3, 4, 5, 6]
    assert columns["loss"].tolist() == pytest.approx([logged[step] for step in range(1, 7)], rel=1e-6)
    told = [e["text"] for e in new if e["type"] == "warning" and "earlier steps" in e["text"]]
    assert len(told) == 1 and told[0].startswith(f"{run / 'steps'}: the run's 4 earlier steps converted"), told


@pytest.mark.slow
def test_an_old_key_in_a_file_or_flag_trains_under_its_new_name_with_a_note(forks, tmp_path: Path) -> None:
    old = tmp_path / "old.toml"
    old.write_text('[task]\nname = "toy"\n\n[train]\nmax_steps = 2\neval_every = 0\n')
    result = run_forked(forks, "train", "--config", str(old), "--set", "train.lr=0.5", "--set", "train.threads=1",
                        "--headless", "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 0, result.stdout + result.stderr
    notes = [line for line in result.stdout.splitlines() if "config layout 3" in line]
    assert len(notes) == 2, result.stdout
    assert f"{old}:6: read under config layout 3's names (train.eval_every → evaluation.every)" in notes[0]
    assert "--set: read under config layout 3's names (train.lr → optimizer.lr, train.threads → runtime.threads)" \
        in notes[1]
    written = cfg.load_resolved(tmp_path / "run" / "config.toml")
    assert (written.optimizer.lr, written.evaluation.every, written.runtime.threads) == (0.5, 0, 1)
    raw, _ = cfg.read_toml(tmp_path / "run" / "config.toml")
    assert raw["version"] == 3 and set(raw["train"]) <= set(type(written.train).model_fields)
    warnings = [e["text"] for e in read_events(tmp_path / "run") if e["type"] == "warning"]
    logged = [w for w in warnings if "config layout 3" in w]  # in the run's log too, for a viewer
    assert len(logged) == 2 and all(text in line for text, line in zip(logged, notes)), (logged, notes)


OLD_PRESET_SPEC = '''
from engine.core.sections import Section
from engine.core.taskspec import Capabilities, Metric, TaskSpec


class C(Section):
    width: int = 4


SPEC = TaskSpec(name="old_preset", config=C, capabilities=Capabilities(primary=Metric("m")), task="old_preset:T",
                presets={"demo": {"train": {"lr": 0.07, "eval_every": 7, "batch_size": 8}}})
'''


def test_a_plugins_preset_in_the_layout_before_3_is_read_in_this_one(tmp_path: Path, monkeypatch) -> None:
    """A plugin's preset written for layout 2 is read in layout 3, so a user's new key overrides its old one
    (merged unconverted, the two names of one field would be refused as given twice)."""
    site = tmp_path / "site"
    info = site / "old_preset-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: old-preset\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[sensorlm_tui.tasks]\nold_preset = old_preset:SPEC\n")
    (site / "old_preset.py").write_text(OLD_PRESET_SPEC)
    monkeypatch.syspath_prepend(str(site))
    assert cfg.load(task="old_preset").optimizer.lr == 0.07
    notes: list = []
    config = cfg.load(task="old_preset", overrides={"optimizer": {"lr": 0.5}}, notes=notes)
    assert (config.optimizer.lr, config.evaluation.every, config.train.batch_size, notes) == (0.5, 7, 8, [])
