"""SensorLM under DDP and FSDP2: 2 ranks (gloo, torchrun) give one process's losses for the same global batch.

Its contrastive loss spans the batch (B×B, centred on the batch mean) and its
caption and reconstruction losses are means over counted entries, so a rank's
own-share losses would not add up to the job's (engine.tasks.sensorlm.job).
Not bit-identical: DDP adds the two ranks' gradients (FSDP2 reduce-scatters
them), one process sums all samples in one reduction (float summation order).
One test runs all three jobs so the one-process baseline is paid once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import output, read_events, run_cli

pytestmark = pytest.mark.slow

#: The demo preset, a small batch and few steps; a constant LR so every step's update counts alike.
SENSORLM = ("--task", "sensorlm", "--preset", "demo", "--batch-size", "8", "--max-steps", "4", "--eval-every", "100",
            "--set", "train.log_every=1", "--set", "schedule.kind='constant'", "--set", "sensorlm.data.val_samples=8")


def _losses(run_dir: Path) -> dict[int, dict]:
    return {e["step"]: e for e in read_events(run_dir) if e.get("type") == "step"}


def _worst_relative_difference(a: dict[int, dict], b: dict[int, dict]) -> float:
    """The largest |a − b| / |a| over every step's loss and loss components; asserts each is ≤ 1e-5."""
    assert sorted(b) == sorted(a) == [1, 2, 3, 4]
    worst = 0.0
    for step in a:
        for key in ("loss", *a[step].get("components", {})):
            x = a[step]["loss"] if key == "loss" else a[step]["components"][key]
            y = b[step]["loss"] if key == "loss" else b[step]["components"][key]
            worst = max(worst, abs(x - y) / abs(x))
            assert abs(x - y) <= 1e-5 * abs(x), (step, key, x, y)
    return worst


def test_two_ranks_ddp_and_fsdp2_give_one_process_losses_with_the_same_global_batch(tmp_path):
    one = run_cli(*SENSORLM, "--run-dir", str(tmp_path / "one"), module="engine", timeout=240)
    assert one.returncode == 0, one.stderr[-2000:]
    for strategy in ("ddp", "fsdp2"):
        two = run_cli(*SENSORLM, "--run-dir", str(tmp_path / strategy), "--nproc-per-node", "2",
                      "--strategy", strategy, module="engine", timeout=240)
        assert two.returncode == 0, f"{strategy}: {output(two)}"
        worst = _worst_relative_difference(_losses(tmp_path / "one"), _losses(tmp_path / strategy))
        print(f"sensorlm 2 ranks ({strategy}) vs 1 process: largest relative loss difference {worst:.2e}")
