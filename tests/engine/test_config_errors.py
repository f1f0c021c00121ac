"""Bad input to `train`: each a one-line error naming the place, exit 2, and nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli

CASES = {
    "malformed toml": ("[train\nlr = 1\n", [], "bad.toml:1:"),
    "unknown key": ("[train]\nlrr = 1\n", [], "bad.toml:2: train.lrr=1: unknown key"),
    "unknown section": ("[trian]\nlr = 1\n", [], "trian"),
    "wrong type": ("[train]\nlr = \"fast\"\n", [], "bad.toml:2: train.lr='fast'"),
    "out of range": ("[train]\nbatch_size = -3\n", [], "bad.toml:2: train.batch_size=-3"),
    "bad literal": ("[model]\nattn_backend = \"flash9\"\n", [], "model.attn_backend='flash9': allowed:"),
    "heads must divide": ("[model]\ndim = 30\nheads = 4\n", [], "model.heads=4 must divide model.dim=30"),
    "unknown preset": (None, ["--preset", "huge"], "--preset 'huge': unknown preset"),
    "unknown task": (None, ["--task", "nope"], "task.name='nope': unknown task"),
    "bad flag type": (None, ["--batch-size", "many"], "--batch-size: invalid integer 'many'"),
    "bad flag range": (None, ["--batch-size", "0"], "--batch-size=0 (train.batch_size)"),
    "bad choice": (None, ["--precision", "fp8"], "--precision: invalid choice"),
    "negative lr": (None, ["--lr", "-1"], "--lr=-1.0 (train.lr)"),
    "bad --set": (None, ["--set", "train.nothing=1"], "train.nothing=1: unknown key"),
    "missing config": (None, ["--config", "/nonexistent/run.toml"], "/nonexistent/run.toml: config file not found"),
    "resume missing dir": (None, ["--resume", "/nonexistent/run"], "--resume /nonexistent/run: no such run directory"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_exit_2(case: str, tmp_path: Path) -> None:
    toml, flags, expected = CASES[case]
    args = ["train", "--task", "toy", "--run-dir", str(tmp_path / "run")]
    if toml is not None:
        (tmp_path / "bad.toml").write_text(toml)
        args += ["--config", str(tmp_path / "bad.toml")]
    result = run_cli(*args, *flags)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert expected in lines[0]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists(), "bad input must not create the run directory"


def test_resume_of_a_run_killed_before_its_first_checkpoint_starts_it_over(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text('[task]\nname = "toy"\n')
    (run / "checkpoints").mkdir()
    (run / "events.jsonl").write_text('{"type": "run_started", "t": 1.0, "name": "run"}\n')  # what it had logged
    result = run_cli("train", "--resume", str(run), "--max-steps", "3", "--headless")
    assert result.returncode == 0, result.stderr
    assert "stopped before its first checkpoint; starting it over from step 0" in result.stdout
    lines = (run / "events.jsonl").read_text().splitlines()
    assert lines[0] == '{"type": "run_started", "t": 1.0, "name": "run"}'  # the old log is kept, appended to
    assert (run / "checkpoints" / "last.safetensors").is_file()


def test_resume_dir_whose_checkpoints_are_all_damaged_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.toml").write_text('[task]\nname = "toy"\n')
    (run / "checkpoints" / "last.safetensors").write_bytes(b"not a checkpoint")
    before = sorted(p.name for p in run.rglob("*"))
    result = run_cli("train", "--resume", str(run))
    assert result.returncode == 2
    assert result.stderr.startswith(f"sensorlm-tui: error: --resume {run}: {run}/checkpoints: no usable checkpoint")
    assert len(result.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in run.rglob("*")) == before
