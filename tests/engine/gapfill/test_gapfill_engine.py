"""The gap-filler through the real engine: trains headless, resumes bit-exact after SIGKILL, aborts when an
injected fault makes its learning rate too high, and refuses a damaged data directory in one line with exit 2."""

from __future__ import annotations

import shutil

import pytest
from gapfill_helpers import cli_flags  # pytest puts this test directory on sys.path

from tests.conftest import kill_at_checkpoint_and_resume, read_events, run_forked

pytestmark = pytest.mark.slow


def _steps(events: list[dict]) -> dict[int, float]:
    return {e["step"]: e["loss"] for e in events if e["type"] == "step"}


def test_trains_and_reports_per_band_psnr_with_baselines(forks, tmp_path, tiny_data):
    result = run_forked(forks, *cli_flags(tmp_path, tiny_data, "--max-steps", "4", "--eval-every", "2",
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
    # The PSNR charts' reference lines: each baseline, named by a metric every eval reports.
    guides = {tuple(g) for m in (started["capabilities"]["primary"], *started["capabilities"]["curves"])
              for g in m.get("guides", ())}
    assert {("nearest", "baseline_nearest_db"), ("blend", "baseline_blend_short_db")} <= guides
    assert {name for _, name in guides} <= set(first)


def test_kill_and_resume_gives_identical_later_losses(forks, tmp_path, tiny_data):
    flags = cli_flags(tmp_path, tiny_data, "--max-steps", "8", "--eval-every", "4", "--checkpoint-every", "4")
    whole = run_forked(forks, *flags, "--run-dir", str(tmp_path / "whole"), timeout=300)
    assert whole.returncode == 0, whole.stderr
    run = tmp_path / "killed"
    kill_at_checkpoint_and_resume(flags, run, 4, timeout=300, forks=forks)
    events = read_events(run)
    restart = [e for e in events if e["type"] == "run_started"][-1]["t"]
    after = {e["step"]: e["loss"] for e in events if e["type"] == "step" and e["t"] > restart}
    reference = _steps(read_events(tmp_path / "whole"))
    assert sorted(after) == list(range(5, 9))
    assert after == {s: reference[s] for s in range(5, 9)}


#: From step FAULT_STEP on, the fault injector multiplies the scheduled LR by FACTOR (engine.training.faults).
FAULT_STEP, FACTOR = 7, 100.0


def test_abort_rule_fires_on_a_run_made_to_regress_by_an_injected_lr(forks, tmp_path, tiny_data):
    # The rule by evals alone: its default patience of 60 s would outlast this 1-second run.
    flags = cli_flags(tmp_path, tiny_data, "--max-steps", "60", "--eval-every", "3", "--run-dir", str(tmp_path / "r"),
                      "--set", "policies.abort_patience_s=0")
    result = run_forked(forks, *flags, faults=f"lr@{FAULT_STEP}-60={FACTOR:g}", timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    events = read_events(tmp_path / "r")
    lrs = {e["step"]: e["lr"] for e in events if e["type"] == "step"}
    assert lrs[FAULT_STEP] / lrs[FAULT_STEP - 1] == pytest.approx(FACTOR, rel=0.05)  # the loop ran at the fault's LR
    finished = [e for e in events if e["type"] == "run_finished"][-1]
    assert finished["status"] == "aborted" and "consecutive evals" in finished["reason"]
    evals = [(e["step"], e["metrics"]["psnr_db"]) for e in events if e["type"] == "eval"]
    best = max(value for _, value in evals)
    assert all(value >= best - 1.5 for step, value in evals if step < FAULT_STEP)  # healthy until the fault
    assert all(value < best - 1.5 for _, value in evals[-2:])  # the engine's rule: 1.5 dB under, twice in a row
    assert FAULT_STEP < finished["steps"] < 60


def test_damaged_data_directory_is_one_line_and_exit_2(forks, tmp_path, tiny_data):
    data = shutil.copytree(tiny_data, tmp_path / "data")
    victim = sorted(data.glob("*.safetensors"))[0]
    victim.write_bytes(victim.read_bytes()[:1000])
    result = run_forked(forks, *cli_flags(tmp_path, data, "--max-steps", "2", "--run-dir", str(tmp_path / "r")),
                        timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and victim.name in lines[0] and "truncated" in lines[0], result.stderr
    assert "Traceback" not in result.stderr
