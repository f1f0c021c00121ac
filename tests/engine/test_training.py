"""The engine trains for real: learning, exact resume after SIGKILL, abort policy, overfit gate, plain output."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.run.sinks import STEP_LINE_S
from engine.run.steps import open_record
from tests.conftest import kill_at_checkpoint_and_resume, log_events, read_events, run_forked

pytestmark = pytest.mark.slow

TOY = ["train", "--task", "toy", "--threads", "1", "--headless"]


def _steps(events: list[dict]) -> dict[int, float]:
    return {e["step"]: e["loss"] for e in events if e["type"] == "step"}


def _last_digest(events: list[dict]) -> str:
    return [e for e in events if e["type"] == "checkpoint"][-1]["digest"]


def test_toy_learns_and_prints_plain_lines(forks, tmp_path: Path) -> None:
    result = run_forked(forks, *TOY, "--max-steps", "120", "--eval-every", "60", "--run-dir", str(tmp_path / "r"))
    assert result.returncode == 0, result.stderr
    assert "\r" not in result.stdout and "\x1b[" not in result.stdout
    evals = [e for e in read_events(tmp_path / "r") if e["type"] == "eval"]
    assert [e["step"] for e in evals] == [0, 60, 120]
    assert evals[-1]["metrics"]["psnr_db"] > evals[0]["metrics"]["psnr_db"] + 1.0
    assert any(line.startswith("eval  step 120") for line in result.stdout.splitlines())
    assert result.stdout.strip().splitlines()[-1].startswith("done  finished at step 120")
    events = read_events(tmp_path / "r")
    assert events[0]["type"] == "schema" and events[0]["version"] == 3
    record = open_record(tmp_path / "r")  # every step in the step record; the log's step lines at its cadence
    assert record.steps().tolist() == list(range(1, 121))
    logged = log_events(tmp_path / "r")
    lines = _steps(logged)
    span = logged[-1]["t"] - next(e["t"] for e in logged if e["type"] == "run_started")
    assert 1 in lines and 120 in lines and len(lines) <= span / STEP_LINE_S + 2, (len(lines), span)
    loss = dict(zip(*record.window("loss", 1, 120)))
    assert {step: np.float32(value) for step, value in lines.items()} == {step: loss[step] for step in lines}


def test_resume_after_sigkill_is_bit_exact(forks, tmp_path: Path) -> None:
    flags = [*TOY, "--max-steps", "40", "--eval-every", "20", "--checkpoint-every", "20", "--lr", "3e-3"]
    whole = run_forked(forks, *flags, "--run-dir", str(tmp_path / "whole"))
    assert whole.returncode == 0, whole.stderr

    run = tmp_path / "killed"
    resumed = kill_at_checkpoint_and_resume(flags, run, 20, kill_wait=30, forks=forks)
    assert "resumed from" in resumed.stdout

    reference, events = _steps(read_events(tmp_path / "whole")), read_events(run)
    after = [e for e in events
             if e["type"] == "step" and e["t"] > [x for x in events if x["type"] == "run_started"][-1]["t"]]
    assert [e["step"] for e in after] == list(range(21, 41))
    assert {e["step"]: e["loss"] for e in after} == {s: reference[s] for s in range(21, 41)}
    assert _last_digest(events) == _last_digest(read_events(tmp_path / "whole"))
    steps, loss = open_record(run).window("loss", 0, 100)  # the record keeps the resumed attempt of 21..40
    assert steps.tolist() == list(range(1, 41))
    assert loss[20:].tolist() == [np.float32(reference[s]) for s in range(21, 41)]


def test_abort_policy_fires_on_psnr_drop(forks, tmp_path: Path) -> None:
    result = run_forked(forks, *TOY, "--max-steps", "200", "--eval-every", "10", "--lr", "0.3",
                        "--schedule", "constant", "--set", "optimizer.clip_grad_norm=0",
                        "--set", "policies.abort_drop=0.5", "--set", "policies.abort_patience_s=0",
                        "--run-dir", str(tmp_path / "r"))
    assert result.returncode == 1, result.stdout + result.stderr
    events = read_events(tmp_path / "r")
    finished = [e for e in events if e["type"] == "run_finished"][-1]
    assert finished["status"] == "aborted" and "consecutive evals" in finished["reason"]
    evals = [e for e in events if e["type"] == "eval"]
    assert {e["primary"] for e in evals} == {"psnr_db"}
    best = max(e["metrics"]["psnr_db"] for e in evals)
    assert all(e["metrics"]["psnr_db"] < best - 0.5 for e in evals[-2:])
    assert finished["steps"] < 200
    assert (tmp_path / "r" / "checkpoints" / "last.safetensors").is_file()


def test_overfit_gate_passes_and_fails(forks, tmp_path: Path) -> None:
    ok = run_forked(forks, *TOY, "--overfit", "4", "--max-steps", "150", "--eval-every", "50", "--lr", "3e-3",
                    "--run-dir", str(tmp_path / "ok"))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "overfit gate passed" in ok.stdout
    bad = run_forked(forks, *TOY, "--overfit", "4", "--max-steps", "20", "--eval-every", "10", "--lr", "1e-6",
                     "--run-dir", str(tmp_path / "bad"))
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "overfit gate FAILED" in bad.stdout
