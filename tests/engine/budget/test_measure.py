"""Measurement: CPU reports nothing it cannot mean; calibration only raises predictions; CUDA on a GPU."""

from __future__ import annotations

import pytest
import torch

from engine.budget import analytic, truth
from engine.budget.measure import Calibration, Meter, Sample, device_info, nvml_memory
from engine.budget.trace_worker import trace as trace_in_process
from tests.engine.budget.conftest import small

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_cpu_meter_reads_no_allocator_and_device_info_is_the_machines_ram() -> None:
    import psutil

    assert Meter("cpu").read() == Sample()  # no allocator counters on CPU: the step peak is counted instead
    info = device_info(torch.device("cpu"))
    assert info.type == "cpu" and info.context is None
    assert info.total == psutil.virtual_memory().total and 0 < info.free <= info.total


def test_nvml_absent_or_not_is_never_a_crash() -> None:
    used, total, mine = nvml_memory()
    assert all(v is None or v >= 0 for v in (used, total, mine))


def test_calibration_raises_never_lowers_and_adds_overheads() -> None:
    low = Calibration(predicted=1000, measured=1200, slack=50, context=300)
    assert low.ratio == 1.2 and low.correct(1000) == 1200 + 350
    high = Calibration(predicted=1000, measured=800, slack=0, context=0)
    assert high.correct(1000) == 1000  # an upper bound stays one
    cal = Calibration.from_sample(1000, Sample(peak=900, peak_reserved=1000), context=64)
    assert cal.slack == 100 and cal.overhead == 164
    assert Calibration.from_sample(1000, Sample(), context=None) is None


@gpu
@pytest.mark.gpu
def test_cuda_traced_and_analytic_against_max_memory_allocated() -> None:
    config = small(train={"batch_size": 8, "device": "cuda"})
    real = truth.peak(config, "cuda", device="cuda")
    traced = trace_in_process(config, "cuda")["peak"]
    bound = analytic.estimate(config, device="cuda").total
    assert abs(traced - real) <= max(0.02 * real, 64 << 20)  # cuBLAS workspaces are not tensors
    assert bound >= real


@gpu
@pytest.mark.gpu
def test_cuda_sample_reads_the_allocator() -> None:
    meter = Meter("cuda")
    x = torch.empty(1 << 20, device="cuda")
    reading = meter.read()
    assert reading.allocated >= x.numel() * 4 and reading.reserved >= reading.allocated and reading.peak > 0
    assert device_info(torch.device("cuda")).total > 0
