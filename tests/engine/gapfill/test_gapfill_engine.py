"""The gap-filler through the real engine: trains headless, resumes bit-exact after SIGKILL, aborts on a
too-high learning rate, and refuses a damaged data directory in one line with exit 2."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import kill_at_checkpoint_and_resume, read_events, run_cli

#: The tiny data set's sample shape and a tiny U-Net (sections as in a TOML file).
TOML = """
[gapfill.model]
base = 8
depth = 1

[gapfill.samples]
neighbours = 2
short_max = 2
long_min = 4
long_max = 12
max_hours = 48
val_samples = 8
"""


def _flags(tmp_path: Path, data: Path, *more: str) -> list[str]:
    config = tmp_path / "gapfill.toml"
    config.write_text(TOML)
    return ["train", "--task", "gapfill", "--headless", "--threads", "1", "--config", str(config),
            "--set", f"data.path={data}", "--batch-size", "4", *more]


def _steps(events: list[dict]) -> dict[int, float]:
    return {e["step"]: e["loss"] for e in events if e["type"] == "step"}


def test_trains_and_reports_per_band_psnr_with_baselines(tmp_path, tiny_data):
    result = run_cli(*_flags(tmp_path, tiny_data, "--max-steps", "4", "--eval-every", "2",
                             "--run-dir", str(tmp_path / "r")), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    events = read_events(tmp_path / "r")
    started = next(e for e in events if e["type"] == "run_started")
    assert started["capabilities"]["primary"]["name"] == "psnr_db"
    evals = [e for e in events if e["type"] == "eval"]
    assert [e["step"] for e in evals] == [0, 2, 4]
    first = evals[0]["metrics"]
    assert first["psnr_db"] == pytest.approx(first["baseline_blend_db"], abs=1e-4)  # untrained = the blend
    assert {f"psnr_{b}_db" for b in ("094", "131", "171", "195", "284", "304")} <= set(first)


def test_kill_and_resume_gives_identical_later_losses(tmp_path, tiny_data):
    flags = _flags(tmp_path, tiny_data, "--max-steps", "8", "--eval-every", "4", "--checkpoint-every", "4")
    whole = run_cli(*flags, "--run-dir", str(tmp_path / "whole"), timeout=300)
    assert whole.returncode == 0, whole.stderr
    run = tmp_path / "killed"
    kill_at_checkpoint_and_resume(flags, run, 4, timeout=300)
    events = read_events(run)
    restart = [e for e in events if e["type"] == "run_started"][-1]["t"]
    after = {e["step"]: e["loss"] for e in events if e["type"] == "step" and e["t"] > restart}
    reference = _steps(read_events(tmp_path / "whole"))
    assert sorted(after) == list(range(5, 9))
    assert after == {s: reference[s] for s in range(5, 9)}


def test_abort_rule_fires_on_a_too_high_learning_rate(tmp_path, tiny_data):
    result = run_cli(*_flags(tmp_path, tiny_data, "--max-steps", "60", "--eval-every", "3", "--lr", "0.5",
                             "--schedule", "constant", "--set", "train.clip_grad_norm=0",
                             "--run-dir", str(tmp_path / "r")), timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    events = read_events(tmp_path / "r")
    finished = [e for e in events if e["type"] == "run_finished"][-1]
    assert finished["status"] == "aborted" and "consecutive evals" in finished["reason"]
    evals = [e["metrics"]["psnr_db"] for e in events if e["type"] == "eval"]
    assert all(value < max(evals) - 1.5 for value in evals[-2:])  # the engine's rule: 1.5 dB, twice in a row
    assert finished["steps"] < 60


def test_damaged_data_directory_is_one_line_and_exit_2(tmp_path, tiny_data):
    data = shutil.copytree(tiny_data, tmp_path / "data")
    victim = sorted(data.glob("*.safetensors"))[0]
    victim.write_bytes(victim.read_bytes()[:1000])
    result = run_cli(*_flags(tmp_path, data, "--max-steps", "2", "--run-dir", str(tmp_path / "r")), timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and victim.name in lines[0] and "truncated" in lines[0], result.stderr
    assert "Traceback" not in result.stderr
