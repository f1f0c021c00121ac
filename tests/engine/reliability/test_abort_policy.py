"""The abort policy a long run survives: not armed in the LR warm-up, patience in steps and seconds as well as
evals, and a resume hint after a policy stop that lets the run go on.

The real run: a toy run whose LR is multiplied 300× (the fault hook's ``lr@A-B=F``) inside its warm-up, so
its metric dips there as a rising LR may make it, and again after it. The dip in the warm-up is not judged;
the one after it stops the run (exit 1); the command the engine prints resumes it to the end (exit 0).
"""

from __future__ import annotations

import re
import shlex

import pytest

from engine.training.policies import AbortPolicy
from tests.conftest import program, read_events
from tests.engine.reliability.harness import TOY

#: 120 steps, the first 60 warm-up, an eval every 5; the LR is 300× on steps 10-25 (in the warm-up) and 70-120.
FLAGS = [*TOY, "--max-steps", "120", "--eval-every", "5", "--schedule", "constant", "--set", "schedule.warmup_frac=0.5",
         "--set", "policies.abort_drop=0.3", "--set", "policies.abort_patience_s=0"]
FAULTS = "lr@10-25=300,lr@70-120=300"


@pytest.mark.slow
def test_a_warm_up_dip_is_not_judged_and_a_policy_stop_resumes_with_the_printed_command(engines, tmp_path) -> None:
    run = tmp_path / "run"
    first = engines.spawn([*FLAGS, "--run-dir", str(run)], tmp_path / "first", faults=FAULTS)
    assert first.wait(120) == 1, first.stderr()
    evals = {e["step"]: e["metrics"]["psnr_db"] for e in read_events(run) if e["type"] == "eval"}
    best_before_dip = max(v for s, v in evals.items() if s < 10)
    dipped = [s for s, v in evals.items() if 10 <= s < 60 and v < best_before_dip - 0.3]
    assert len(dipped) >= 2, f"the warm-up dip the old rule stopped at: {evals}"
    finished = [e for e in read_events(run) if e["type"] == "run_finished"][-1]
    assert finished["status"] == "aborted" and finished["steps"] >= 70, finished
    assert "since warm-up" in finished["reason"] and "--set policies.abort_patience=0" in finished["reason"]

    printed = next(m for m in map(re.compile(r"^done\s+resume with: (.*)$").match, first.lines()) if m).group(1)
    start = program(tmp_path / "first")  # the program as it runs from the engine's directory
    assert printed == finished["resume_command"] == f"{start} train --resume {run} --set policies.abort_patience=0"
    argv = shlex.split(printed.removeprefix(start))
    assert argv[0] == "train"
    resumed = engines.spawn([*argv[1:], "--threads", "1"], tmp_path / "resumed", faults=FAULTS)
    assert resumed.wait(120) == 0, resumed.stderr()
    last = [e for e in read_events(run) if e["type"] == "run_finished"][-1]
    assert last["status"] == "finished" and last["steps"] == 120


def test_patience_holds_at_any_step_rate() -> None:
    """Two evals 50 steps apart at 100 steps/s are half a second: not enough to stop on by default."""
    policy = AbortPolicy(drop=1.5, patience=2, armed_from=0, patience_steps=1000, patience_s=60.0)
    clock, stopped_at = 0.0, None
    for step, value in enumerate([22.9] + [20.0] * 400):
        clock += 0.5  # an eval every 50 steps at 100 steps/s
        _, stop = policy.update(value, step * 50, clock)
        if stop:
            stopped_at = step * 50
            break
    assert stopped_at is not None and policy.strikes == 121 and stopped_at == 6050  # 60 s and 1000 steps later
    assert policy.streak_s == 60.0


def test_a_resume_keeps_the_streak_and_takes_the_rule_from_the_config() -> None:
    policy = AbortPolicy(drop=1.0, patience=3, armed_from=100)
    for step, value in [(0, 30.0), (50, 10.0), (100, 20.0), (150, 18.0), (200, 18.0)]:
        assert policy.update(value, step, float(step)) == (step == 0, False)
    assert (policy.best, policy.reference, policy.strikes, policy.streak_step) == (30.0, 20.0, 2, 150)
    resumed = AbortPolicy(drop=1.0, patience=0, armed_from=100)  # resumed with --set policies.abort_patience=0
    resumed.load_state(policy.state())
    assert resumed.update(17.0, 250, 0.0) == (False, False) and resumed.strikes == 3
    older = AbortPolicy(drop=1.0, patience=2)
    older.load_state({"drop": 1.5, "patience": 2, "higher_is_better": True, "best": 5.0, "strikes": 1})
    assert (older.drop, older.reference, older.strikes) == (1.0, 5.0, 1), "an older checkpoint's state still loads"


#: A toy run whose weights blow up on steps 2-4 (LR 10 × 10⁶), NaN steps skipped: every eval from step 4 is NaN.
NAN_FLAGS = [*TOY, "--eval-every", "4", "--set", "optimizer.lr=10", "--set", "policies.nan_policy=skip"]


def test_a_primary_metric_not_finite_warns_once_and_the_end_line_says_no_best_was_kept(engines, tmp_path) -> None:
    """A primary metric NaN from some eval on (or on every eval) drew no word: the abort rule skipped it, and no
    best checkpoint was ever written."""
    run = tmp_path / "run"
    first = engines.spawn([*NAN_FLAGS, "--max-steps", "12", "--run-dir", str(run)], tmp_path / "first",
                          faults="lr@2-4=1000000")
    assert first.wait(120) == 0, first.stderr()
    evals = [(e["step"], e["metrics"]["psnr_db"]) for e in read_events(run) if e["type"] == "eval"]
    assert [s for s, v in evals if v == "nan"] == [4, 8, 12], evals  # NaN from step 4 on (JSON has none: a string)
    said = [e["text"] for e in read_events(run) if e["type"] == "warning" and "psnr_db" in e["text"]]
    assert said == ["val psnr_db is nan at step 4: not finite, so it is never the best and the abort rule cannot "
                    "judge it; no best checkpoint is kept while it stays so"]
    note = "no best kept since step 4: val psnr_db not finite from there on"
    assert [e for e in read_events(run) if e["type"] == "run_finished"][-1]["reason"] == note
    assert any(line.startswith(f"done  finished at step 12 {note}") for line in first.lines()), first.lines()[-3:]
    assert not (run / "checkpoints" / "best.safetensors").exists()
    # Resumed, it is still NaN: not warned again (the step it began at is in the checkpoint), and still said.
    again = engines.spawn(["--resume", str(run), "--max-steps", "16"], tmp_path / "again")
    assert again.wait(120) == 0, again.stderr()
    assert [e["text"] for e in read_events(run) if e["type"] == "warning" and "psnr_db" in e["text"]] == said
    assert [e for e in read_events(run) if e["type"] == "run_finished"][-1]["reason"] == note


def test_a_primary_metric_never_finite_says_no_best_was_ever_kept() -> None:
    policy = AbortPolicy(drop=0.5, patience=3)
    for step in (0, 5, 10):
        assert policy.update(float("nan"), step) == (False, False)
    assert policy.best is None and policy.not_finite_from == 0
    assert policy.end_note("psnr_db") == "no best kept: val psnr_db was never finite (from step 0 on)"
    policy.update(3.0, 15)
    assert policy.not_finite_from is None and policy.end_note("psnr_db") == ""
