"""A checkpoint belongs to its run: another run's or another task's is refused; the newest intact one is taken;
the errors say what is really wrong (a task flag that conflicts, a shape that differs) instead of something else.

Two finished toy runs of different seeds are shared by the module; each test copies what it changes.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from engine.checkpoint import format as ckpt
from tests.conftest import ROOT
from tests.engine.reliability.harness import TOY, events_of

FIXTURES = ROOT / "tests" / "fixtures" / "runs_v1"


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _refused(engine, *expect: str) -> str:
    code = engine.wait(120)
    lines = engine.stderr().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in engine.stderr(), (code, engine.stderr())
    assert lines[0].startswith("sensorlm-tui: error: ") and all(e in lines[0] for e in expect), lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def runs(engines, tmp_path_factory) -> dict[int, Path]:
    """seed → a toy run finished at step 4 (last at 4, last.prev at 2)."""
    where = tmp_path_factory.mktemp("seeds")
    out = {}
    for seed in (1, 2):
        run = where / f"seed{seed}"
        engine = engines.spawn([*TOY, "--seed", str(seed), "--max-steps", "4", "--eval-every", "2",
                                "--checkpoint-every", "2", "--run-dir", str(run)], where / "io")
        assert engine.wait(120) == 0, engine.stderr()
        out[seed] = run
    return out


def _copy(run: Path, to: Path) -> Path:
    shutil.copytree(run, to, symlinks=True)
    return to


def _run_id(run: Path) -> str:
    return next(line.split('"')[1] for line in (run / "config.toml").read_text().splitlines()
                if line.startswith("run_id"))


def test_another_runs_checkpoint_of_the_same_task_is_refused_not_resumed(engines, runs, tmp_path: Path) -> None:
    run = _copy(runs[1], tmp_path / "run")
    shutil.copy(runs[2] / "checkpoints" / "last.safetensors", run / "checkpoints" / "last.safetensors")
    assert _run_id(runs[1]) != _run_id(runs[2])
    before = _tree(run)
    _refused(engines.spawn(["--resume", str(run), "--max-steps", "6"], tmp_path / "io"),
             f"{run / 'checkpoints' / 'last.safetensors'}: a checkpoint of another run (run id {_run_id(runs[2])}; "
             f"this run's, in its config.toml, is {_run_id(runs[1])}): not resumed into it")
    assert _tree(run) == before, "the refused resume wrote into the run"


def test_another_tasks_checkpoint_is_refused_not_resumed_as_that_task(engines, runs, tmp_path: Path) -> None:
    """A toy checkpoint dropped into a SensorLM run (one made by the previous release: no run id on either side)
    resumed as a toy run inside it."""
    run = _copy(FIXTURES / "sensorlm_v1", tmp_path / "sensorlm")
    for old in (run / "checkpoints").iterdir():
        old.unlink()
    shutil.copy(runs[1] / "checkpoints" / "last.safetensors", run / "checkpoints" / "last.safetensors")
    before = _tree(run)
    _refused(engines.spawn(["--resume", str(run), "--max-steps", "6"], tmp_path / "io"),
             "last.safetensors: a checkpoint of task 'toy', and this run trains 'sensorlm' (its config.toml)")
    assert _tree(run) == before


def test_with_last_truncated_the_newest_intact_checkpoint_of_any_kind_is_taken(engines, runs, tmp_path: Path) -> None:
    """`best` at step 4 beats `last.prev` at step 2 (taking last.prev redid the steps in between); the log says
    which file it took and which it skipped."""
    run = _copy(runs[1], tmp_path / "run")
    checkpoints = run / "checkpoints"
    shutil.copy(checkpoints / "last.safetensors", checkpoints / "best.safetensors")  # an intact best at step 4
    data = (checkpoints / "last.safetensors").read_bytes()
    (checkpoints / "last.safetensors").write_bytes(data[: len(data) // 2])
    assert ckpt.read(checkpoints / "last.prev.safetensors").meta["step"] == 2
    engine = engines.spawn(["--resume", str(run), "--max-steps", "6"], tmp_path / "io")
    assert engine.wait(120) == 0, engine.stderr()
    started = events_of(run, "run_started")[-1]
    assert started["start_step"] == 4 and started["resumed_from"].endswith("best.safetensors"), started
    out = engine.out.read_text()
    assert "skipped damaged checkpoint: " in out and "last.safetensors: not a readable checkpoint" in out, out
    assert "resume: took best.safetensors (step 4), the newest checkpoint that verifies" in out, out


def test_a_task_flag_on_resume_says_the_task_conflicts(engines, runs, tmp_path: Path) -> None:
    run = _copy(runs[1], tmp_path / "run")
    line = _refused(engines.spawn(["--resume", str(run), "--task", "sensorlm"], tmp_path / "io"),
                    f"--task sensorlm: {run} trains task 'toy' (its config.toml); a resume continues its own task")
    assert "unknown key" not in line


def test_a_shape_flag_on_resume_says_the_shape_differs_and_calls_nothing_damaged(engines, runs, tmp_path: Path) -> None:
    run = _copy(runs[1], tmp_path / "run")
    before = _tree(run)
    line = _refused(engines.spawn(["--resume", str(run), "--set", "toy.dim=16", "--max-steps", "6"], tmp_path / "io"),
                    "checkpoint is from another model shape",
                    "the model this config builds differs from the checkpoint's (3 intact checkpoint(s), none of "
                    "this shape): resume without the flags that change the model")  # last, last.prev, best
    assert "damaged" not in line
    assert _tree(run) == before
