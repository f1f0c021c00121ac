"""Injected NaN losses, out-of-memory errors and crashes in a real engine process, and what the engine does.

NaN: the step is skipped (weights untouched), counted and warned about; K in
a row roll back to the last good checkpoint with a lower LR, or stop
(nan_policy=stop, exit 1); NaN that comes back after every rollback stops the
run instead of looping forever. OOM: grad_accum doubles, the effective batch
stays, the same step is redone on the same samples. A crash: traceback in
engine.log, a checkpoint of the last good state, RunFinished failed, exit 1,
and the run resumes.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.conftest import log_events
from tests.engine.reliability.harness import TOY, events_of

QUICK = [*TOY, "--eval-every", "0", "--checkpoint-every", "10"]


def _steps(run: Path) -> list[dict]:
    return events_of(run, "step")


def test_single_nan_step_is_skipped_counted_and_warned(engines, tmp_path: Path) -> None:
    from engine.checkpoint import store

    run = tmp_path / "run"
    engine = engines.spawn([*QUICK, "--max-steps", "12", "--run-dir", str(run)], tmp_path, faults="nan@7")
    assert engine.wait(60) == 0, engine.stderr()
    steps = _steps(run)
    assert [e["step"] for e in steps] == list(range(1, 13))
    bad = steps[6]
    assert bad["skipped"] and math.isnan(bad["loss"]) and math.isnan(bad["grad_norm"])  # the step record's NaN
    line = next(e for e in log_events(run) if e["type"] == "step" and e["step"] == 7)  # a skipped step has a line
    assert line["skipped"] and line["loss"] == "nan" and line["grad_norm"] == "nan"  # events.jsonl spells NaN "nan"
    assert not any(e["skipped"] for e in steps if e["step"] != 7)
    warnings = [e["text"] for e in events_of(run, "warning")]
    assert any(text.startswith("step 7: non-finite loss or gradient; optimizer step skipped (1 in a row)")
               for text in warnings), warnings
    assert "skip  step 7 non-finite" in "\n".join(engine.lines())
    meta = store.load_latest(run / "checkpoints").meta
    assert meta["step"] == 12 and meta["nan"]["total"] == 1 and meta["nan"]["consecutive"] == 0


def test_nan_skip_leaves_the_weights_untouched(engines, tmp_path: Path) -> None:
    """The checkpoint after a skipped step 3 holds exactly the weights and optimizer state of step 2."""
    from engine.checkpoint import format as ckpt

    run = tmp_path / "run"
    engine = engines.spawn([*TOY, "--eval-every", "0", "--max-steps", "3", "--checkpoint-every", "1",
                            "--set", "checkpoint.keep_last=3", "--run-dir", str(run)], tmp_path, faults="nan@3")
    assert engine.wait(60) == 0, engine.stderr()
    two = ckpt.read(run / "checkpoints" / "step-00000002.safetensors").tensors
    three = ckpt.read(run / "checkpoints" / "step-00000003.safetensors").tensors
    model = [k for k in two if k.startswith("model.")]
    assert model and all(torch_equal(two[k], three[k]) for k in model)
    assert ckpt.optimizer_digest(two) == ckpt.optimizer_digest(three)
    one = ckpt.read(run / "checkpoints" / "step-00000001.safetensors").tensors
    assert not all(torch_equal(one[k], two[k]) for k in model)  # a step that is not skipped does move them


def torch_equal(a, b) -> bool:
    """Bit-equal tensors."""
    return bool((a == b).all())


def test_consecutive_nans_roll_back_with_lower_lr(engines, tmp_path: Path) -> None:
    run = tmp_path / "run"
    engine = engines.spawn([*QUICK, "--max-steps", "20", "--set", "policies.nan_patience=3", "--lr", "2e-3",
                            "--run-dir", str(run)], tmp_path, faults="nan@12-14")
    assert engine.wait(60) == 0, engine.stderr()
    changes = [e for e in events_of(run, "setting") if e["name"] == "lr"]
    assert len(changes) == 1, changes
    assert "3 consecutive non-finite steps: rolled back to step 10" in changes[0]["reason"]
    assert changes[0]["new"] == 2e-3 * 0.5
    steps = _steps(run)
    # step 12's first attempt was skipped (its line is in the log); the record keeps its redo, after the rollback
    first = next(e for e in log_events(run) if e["type"] == "step" and e["step"] == 12)
    (again,) = [e for e in steps if e["step"] == 12]
    assert first["skipped"] and not again["skipped"]
    assert again["lr"] == pytest.approx(first["lr"] * 0.5, rel=1e-6)  # the same step of the schedule, at half the peak
    assert [e["step"] for e in steps if e["t"] > changes[0]["t"]][-1] == 20
    assert events_of(run, "run_finished")[-1]["status"] == "finished"


def test_nan_policy_stop_exits_1_with_a_resumable_run(engines, tmp_path: Path) -> None:
    run = tmp_path / "run"
    engine = engines.spawn([*QUICK, "--max-steps", "20", "--set", "policies.nan_patience=3",
                            "--set", "policies.nan_policy=stop", "--run-dir", str(run)], tmp_path, faults="nan@5-7")
    assert engine.wait(60) == 1, engine.stderr()
    finished = events_of(run, "run_finished")[-1]
    assert finished["status"] == "failed" and "3 consecutive non-finite steps" in finished["reason"]
    assert finished["steps"] == 7
    resumed = engines.spawn(["--resume", str(run)], tmp_path)
    assert resumed.wait(60) == 0, resumed.stderr()
    assert resumed.lines()[-1].startswith("done  finished at step 20")


@pytest.mark.slow
def test_nan_that_survives_every_rollback_stops_the_run(engines, tmp_path: Path) -> None:
    """Data that always gives NaN (sticky fault) must not roll back forever."""
    run = tmp_path / "run"
    engine = engines.spawn([*QUICK, "--max-steps", "40", "--set", "policies.nan_patience=2", "--run-dir", str(run)],
                           tmp_path, faults="nan@12-13*")
    assert engine.wait(60) == 1, engine.stderr()
    rollbacks = [e for e in events_of(run, "setting") if e["name"] == "lr"]
    assert len(rollbacks) == 3  # engine.training.loop.MAX_ROLLBACKS_TO_ONE_STEP
    finished = events_of(run, "run_finished")[-1]
    assert finished["status"] == "failed" and "after 3 rollbacks to step 10" in finished["reason"], finished


def test_oom_doubles_grad_accum_keeps_the_batch_and_redoes_the_step(engines, tmp_path: Path) -> None:
    flags = [*QUICK, "--max-steps", "10", "--batch-size", "32"]
    ref = engines.spawn([*flags, "--run-dir", str(tmp_path / "ref")], tmp_path)
    oom = engines.spawn([*flags, "--run-dir", str(tmp_path / "oom")], tmp_path, faults="oom@7")
    assert ref.wait(60) == 0 and oom.wait(60) == 0, oom.stderr()
    change = [e for e in events_of(tmp_path / "oom", "setting") if e["name"] == "grad_accum"]
    assert len(change) == 1 and (change[0]["old"], change[0]["new"]) == (1, 2)
    assert "out of memory" in change[0]["reason"] and "effective batch 32 kept" in change[0]["reason"]
    assert change[0]["step"] == 6  # raised while computing step 7 (6 done)
    steps, reference = _steps(tmp_path / "oom"), _steps(tmp_path / "ref")
    assert [e["step"] for e in steps] == list(range(1, 11))  # step 7 once: redone, not skipped
    assert {e["batch_size"] for e in steps} == {32}
    for mine, theirs in zip(steps, reference):  # same samples: equal up to the sum order of two micro-batches
        assert math.isclose(mine["loss"], theirs["loss"], rel_tol=1e-5), (mine["step"], mine["loss"], theirs["loss"])
    from engine.checkpoint import store

    assert store.load_latest(tmp_path / "oom" / "checkpoints").meta["grad_accum"] == 2


def test_crash_in_training_logs_checkpoints_and_resumes(engines, tmp_path: Path) -> None:
    from engine.checkpoint import store

    run = tmp_path / "run"
    engine = engines.spawn([*QUICK, "--max-steps", "20", "--run-dir", str(run)], tmp_path, faults="raise@14")
    assert engine.wait(60) == 1
    log = (run / "engine.log").read_text()
    assert "Traceback (most recent call last)" in log and "RuntimeError: injected crash at step 14" in log
    finished = events_of(run, "run_finished")[-1]
    assert finished["status"] == "failed" and finished["exit_code"] == 1
    assert "RuntimeError: injected crash at step 14" in finished["reason"]
    saved = [e for e in events_of(run, "checkpoint") if e["kind"] == "crash"]
    assert [e["step"] for e in saved] == [13]  # the last good state: step 13 done, step 14 never applied
    assert store.load_latest(run / "checkpoints").meta["step"] == 13
    resumed = engines.spawn(["--resume", str(run)], tmp_path)
    assert resumed.wait(60) == 0, resumed.stderr()
    assert resumed.wait_for(r"^start .* at step (\d+)").group(1) == "13"
    assert resumed.lines()[-1].startswith("done  finished at step 20")


def test_a_bad_fault_spec_is_a_one_line_error(engines, tmp_path: Path) -> None:
    engine = engines.spawn([*QUICK, "--max-steps", "5", "--run-dir", str(tmp_path / "run")], tmp_path,
                           faults="nan@7,explode@3")
    assert engine.wait(60) == 2
    assert engine.stderr().splitlines() == [
        "sensorlm-tui: error: SENSORLM_TUI_FAULTS: 'explode@3': unknown fault; allowed: nan@N, nan@A-B, oom@N, "
        "raise@N (a trailing * repeats), lr@A-B=FACTOR, slow@A-B=SECONDS, slow_save=SECONDS"]
    assert not (tmp_path / "run").exists()
