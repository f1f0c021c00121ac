"""Bad input to `train`: each a one-line error naming the place, exit 2, and nothing written."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, cli_env, run_cli, run_forked

CASES = {
    "malformed toml": ("[train\nlr = 1\n", [], "bad.toml:1:"),
    "unknown key": ("[optimizer]\nlrr = 1\n", [], "bad.toml:2: optimizer.lrr=1: unknown key; allowed: lr, betas, "
                    "eps, weight_decay, clip_grad_norm"),
    "unknown section": ("[trian]\nlr = 1\n", [], "trian"),
    "wrong type": ("[optimizer]\nlr = \"fast\"\n", [], "bad.toml:2: optimizer.lr='fast'"),
    # a key of the layout before 3 is read under its new name, and its errors point at its own line
    "old key, wrong type": ("[task]\nname = \"toy\"\n[train]\nlr = \"fast\"\n", [], "bad.toml:4: optimizer.lr='fast'"),
    "old and new name both": ("[optimizer]\nlr = 0.1\n[train]\nlr = 0.2\n", [], "bad.toml:4: train.lr and "
                              "optimizer.lr are the same field (train.lr is its name before config layout 3); give "
                              "it once, as optimizer.lr"),
    "old name in a flag and the new one": (None, ["--lr", "0.1", "--set", "train.lr=0.2"], "--set: train.lr and "
                                           "optimizer.lr are the same field"),
    "out of range": ("[train]\nbatch_size = -3\n", [], "bad.toml:2: train.batch_size=-3"),
    "bad literal": ("[sensorlm.model]\nattn_backend = \"flash9\"\n", ["--task", "sensorlm"],
                    "bad.toml:2: sensorlm.model.attn_backend='flash9': allowed:"),
    "heads must divide": ("[sensorlm.model]\ndim = 30\nheads = 4\n", ["--task", "sensorlm"],
                          "sensorlm.model.heads=4 must divide sensorlm.model.dim=30"),
    "v1 file, task field": ("[model]\ndim = 3\n", [],
                            "bad.toml:2: toy.dim=3: Input should be greater than or equal to 8"),
    "task section unknown key": ("[toy]\nwidth = 3\n", [], "bad.toml:2: toy.width=3: unknown key"),
    "other task's section": ("[sensorlm.model]\ndim = 32\n", [], "bad.toml: sensorlm: unknown key"),
    "setting the task lacks": (None, ["--attn-chunk", "64"], "--attn-chunk: task 'toy' has no such setting"),
    "unknown task lists tasks": (None, ["--task", "nope"], "unknown task; allowed: gapfill, lm, sensorlm, toy"),
    "unknown preset": (None, ["--preset", "huge"], "--preset 'huge': unknown preset"),
    "unknown task": (None, ["--task", "nope"], "task.name='nope': unknown task"),
    "bad flag type": (None, ["--batch-size", "many"], "--batch-size: invalid integer 'many'"),
    "bad flag range": (None, ["--batch-size", "0"], "--batch-size=0 (train.batch_size)"),
    "bad choice": (None, ["--precision", "fp8"], "--precision: invalid choice"),
    "negative lr": (None, ["--lr", "-1"], "--lr=-1.0 (optimizer.lr)"),
    "bad --set": (None, ["--set", "train.nothing=1"], "--set train.nothing=1: unknown key; allowed: max_steps, "),
    "bad --set section": (None, ["--set", "runtimes.threads=1"], "--set runtimes: unknown key; allowed: version, "
                          "name, run_id, task, train, optimizer, schedule, evaluation, policies, runtime, data, "
                          "checkpoint"),
    "missing config": (None, ["--config", "/nonexistent/run.toml"], "/nonexistent/run.toml: config file not found"),
    "resume missing dir": (None, ["--resume", "/nonexistent/run"], "--resume /nonexistent/run: no such run directory"),
    # hostile or contradictory flags: each must be one line naming the flag, not a traceback, a no-op or accepted
    "set a section then its field": (None, ["--set", "train=1", "--set", "train.max_steps=3"],
                                     "--set train.max_steps: train was already set to a value (1)"),
    "seed past 64 bits": (None, ["--seed", str(2**64)], "--seed=18446744073709551616 (train.seed): Input should be "
                          "less than or equal to 9223372036854775807"),
    "beta out of range": ("[optimizer]\nbetas = [1.5, 0.9]\n", [], "optimizer.betas.0=1.5: Input should be less "
                          "than 1"),
    "val_samples huge": ("[toy]\nval_samples = 1000000000000\n", [],
                         "bad.toml:2: toy.val_samples=1000000000000: Input should be less than or equal to 1000000"),
    "name over 255 bytes": (None, ["--name", "é" * 128], "256 bytes; a run name is at most 255 bytes"),
    "config is /dev/zero": (None, ["--config", "/dev/zero"], "/dev/zero: cannot read (a device, not a regular file)"),
    "toy task with --data": (None, ["--data", "/etc/hostname"], "data.path='/etc/hostname' (--data): the toy task "
                             "generates its own data"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_exit_2(forks, case: str, tmp_path: Path) -> None:
    toml, flags, expected = CASES[case]
    args = ["train", "--task", "toy", "--run-dir", str(tmp_path / "run")]
    if toml is not None:
        (tmp_path / "bad.toml").write_text(toml)
        args += ["--config", str(tmp_path / "bad.toml")]
    result = run_forked(forks, *args, *flags)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert expected in lines[0]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists(), "bad input must not create the run directory"


def _one_line(result, expected: str) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("sensorlm-tui: error: ") and expected in result.stderr, result.stderr


def test_a_fifo_as_config_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "run.toml"
    os.mkfifo(fifo)  # nobody ever writes to it: reading it would block forever
    _one_line(run_cli("train", "--task", "toy", "--config", str(fifo), timeout=30),
              f"{fifo}: cannot read (a FIFO, not a regular file)")


def test_a_run_dir_path_that_cannot_be_used_is_one_line(tmp_path: Path) -> None:
    long = tmp_path / ("a" * 300) / "run"
    _one_line(run_cli("train", "--task", "toy", "--run-dir", str(long)), "cannot use this path (File name too long)")
    _one_line(run_cli("train", "--resume", str(long)), "cannot read the run directory (File name too long)")


def test_unreadable_parent_is_one_line(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    (locked / "inner").mkdir(parents=True)
    locked.chmod(0)
    # root passes permission bits; without its capabilities (setpriv) it meets them like any user
    prefix = ["setpriv", "--bounding-set", "-all", "--inh-caps", "-all"] if os.geteuid() == 0 else []
    if prefix and not shutil.which("setpriv"):
        pytest.skip("root without setpriv: permission bits cannot be tested")
    try:
        for flags, expected in ((["--task", "toy", "--run-dir", str(locked / "inner" / "run")],
                                 "cannot use this path (Permission denied)"),
                                (["--resume", str(locked / "inner")],
                                 "cannot read the run directory (Permission denied)")):
            result = subprocess.run([*prefix, sys.executable, "-m", "tui.cli", "train", *flags], cwd=ROOT,
                                    env=cli_env(), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
            _one_line(result, expected)
    finally:
        locked.chmod(0o755)


def _finished_run(forks, tmp_path: Path) -> Path:
    run = tmp_path / "done"
    result = run_forked(forks, "train", "--task", "toy", "--threads", "1", "--max-steps", "2", "--run-dir", str(run),
                     "--headless")
    assert result.returncode == 0, result.stderr
    return run


@pytest.mark.slow
def test_resume_refuses_config_and_another_run_dir_but_takes_its_own(forks, tmp_path: Path) -> None:
    run = _finished_run(forks, tmp_path)
    (tmp_path / "other.toml").write_text("[optimizer]\nlr = 0.5\n")
    before = (run / "config.toml").read_bytes()
    _one_line(run_forked(forks, "train", "--resume", str(run), "--config", str(tmp_path / "other.toml")),
              "--config " + str(tmp_path / "other.toml") + ": not allowed with --resume")
    _one_line(run_forked(forks, "train", "--resume", str(run), "--run-dir", str(tmp_path / "elsewhere")),
              "not allowed with --resume")
    assert not (tmp_path / "elsewhere").exists() and (run / "config.toml").read_bytes() == before
    same = run_forked(forks, "train", "--resume", str(run), "--run-dir", f"{run}/", "--max-steps", "3", "--headless")
    assert same.returncode == 0, same.stderr  # the dashboard's launcher always passes --run-dir


@pytest.mark.slow
def test_resume_of_a_run_killed_before_its_first_checkpoint_starts_it_over(forks, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text('[task]\nname = "toy"\n')
    (run / "checkpoints").mkdir()
    (run / "events.jsonl").write_text('{"type": "run_started", "t": 1.0, "name": "run"}\n')  # what it had logged
    result = run_forked(forks, "train", "--resume", str(run), "--max-steps", "3", "--headless")
    assert result.returncode == 0, result.stderr
    assert "stopped before its first checkpoint; starting it over from step 0" in result.stdout
    lines = (run / "events.jsonl").read_text().splitlines()
    assert lines[0] == '{"type": "run_started", "t": 1.0, "name": "run"}'  # the old log is kept, appended to
    assert (run / "checkpoints" / "last.safetensors").is_file()


def test_resume_dir_whose_checkpoints_are_all_damaged_is_refused(forks, tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.toml").write_text('[task]\nname = "toy"\n')
    (run / "checkpoints" / "last.safetensors").write_bytes(b"not a checkpoint")
    before = sorted(p.name for p in run.rglob("*"))
    result = run_forked(forks, "train", "--resume", str(run))
    assert result.returncode == 2
    assert result.stderr.startswith(f"sensorlm-tui: error: --resume {run}: {run}/checkpoints: no usable checkpoint")
    assert len(result.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in run.rglob("*")) == before
