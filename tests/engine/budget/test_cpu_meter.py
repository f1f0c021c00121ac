"""CPU memory measured: a step's storages counted through the dispatcher, equal to held-out counts; in the run."""

from __future__ import annotations

import psutil
import pytest
import torch

from engine.budget import truth
from engine.budget.cpu_meter import StepPeak
from engine.core import config as cfg
from tests.conftest import read_events, run_cli


def test_counts_live_storages_once_and_subtracts_frees() -> None:
    held = torch.zeros(250)  # 1000 bytes that exist before
    with StepPeak([held]) as meter:
        a = torch.ones(1000)  # 4000
        view = a[10:20] * 1  # 40, a new storage; the slice itself is a view of a's
        b = torch.ones(2000)  # 8000
        del a
        c = held + 1  # 1000; held is counted once however often it is used
    assert meter.peak == 1000 + 4000 + 40 + 8000
    assert meter.current == 1000 + 40 + 8000 + 1000
    del view, b, c
    assert meter.current == 1000


def test_two_steps_equal_the_held_out_memtracker_and_profiler_counts() -> None:
    config = cfg.load(preset="demo", task="toy")
    meter = truth.peak(config, method="dispatcher")  # StepPeak over the same two steps the held-out counts run
    tracker = truth.peak(config, method="memtracker")
    profiler = truth.peak(config, method="profiler")
    assert meter == pytest.approx(tracker, rel=0.01)
    assert meter == pytest.approx(profiler, rel=0.01)


@pytest.mark.slow
def test_a_cpu_run_reports_the_measured_peak_with_rss_against_available_ram(tmp_path) -> None:
    # batches built inline: the prediction is then the step's alone (with a data path building ahead it also holds
    # those batches, engine.budget.ahead, which the count of the training thread's step does not see)
    out = run_cli("train", "--headless", "--task", "toy", "--max-steps", "4", "--name", "m",
                  "--set", "runtime.prefetch=false", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    samples = [e for e in read_events(tmp_path / "runs" / "m") if e["type"] == "memory"]
    measured = [s for s in samples if s["peak"] is not None]
    assert measured and measured[0]["step"] == 2  # the first step with the optimizer state
    sample = measured[0]
    assert sample["device"] == "cpu" and "dispatcher" in sample["source"]
    assert sample["rss"] > sample["peak"] > 0  # rss holds the interpreter and torch too
    assert sample["budget"] > 0 and sample["capacity"] == psutil.virtual_memory().total
    # The toy's analytic prediction is exact on CPU (tests/engine/budget): the measured peak agrees.
    assert sample["ratio"] == pytest.approx(1.0, abs=0.01)
