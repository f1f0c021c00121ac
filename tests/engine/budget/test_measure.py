"""Measurement: CPU reports nothing it cannot mean; calibration only raises predictions; CUDA on a GPU."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

from engine.budget import analytic, truth
from engine.budget.measure import (
    Calibration,
    DeviceInfo,
    Meter,
    Sample,
    context_bound,
    context_now,
    device_info,
    nvml_memory,
    read_nvml_memory,
)
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
    reading = nvml_memory()
    assert all(v is None or v >= 0 for v in (reading.used, reading.total, reading.mine, reading.reserved))


MIB = 1 << 20


class FakeNvml:
    """The pynvml calls the engine makes, answering as the H200 did: 143,771 MiB, a 615 MiB driver reserve
    that v1's ``used`` counts and v2 (and nvidia-smi) list apart, this process at 1,023 MiB."""

    nvmlMemory_v2 = 0x02000028
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, driver_has_v2: bool = True, processes=None) -> None:
        self.driver_has_v2 = driver_has_v2
        self.processes = processes if processes is not None else [SimpleNamespace(pid=os.getpid(),
                                                                                 usedGpuMemory=1023 * MIB)]

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        total, reserve, smi_used = 143771 * MIB, 615 * MIB, 1023 * MIB
        if version is None:
            return SimpleNamespace(total=total, free=total - smi_used - reserve, used=smi_used + reserve)
        if not self.driver_has_v2:
            raise RuntimeError("NVML_ERROR_FUNCTION_NOT_FOUND")
        assert version == self.nvmlMemory_v2
        return SimpleNamespace(version=version, total=total, reserved=reserve, free=total - smi_used - reserve,
                               used=smi_used)

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return self.processes

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=97)

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return 50

    def nvmlDeviceGetPowerUsage(self, handle):
        return 300_000


class OldBinding(FakeNvml):
    """An nvidia-ml-py too old to know nvmlMemory_v2."""

    nvmlMemory_v2 = None


def test_nvml_memory_reads_like_nvidia_smi_with_the_drivers_reserve_apart() -> None:
    v2 = read_nvml_memory(FakeNvml(), handle=0)
    assert (v2.version, v2.used, v2.reserved, v2.mine) == ("v2", 1023 * MIB, 615 * MIB, 1023 * MIB)
    assert v2.note() == ""
    for fake in (FakeNvml(driver_has_v2=False), OldBinding()):  # fall back to v1, and say so
        v1 = read_nvml_memory(fake, handle=0)
        assert (v1.version, v1.used, v1.reserved) == ("v1", (1023 + 615) * MIB, None)
        assert "v1" in v1.note() and "reserved" in v1.note()


def test_context_is_measured_from_the_process_then_the_device_then_mem_get_info() -> None:
    reserved = 272 * MIB
    assert context_now(0, reserved, read_nvml_memory(FakeNvml(), 0)) == (751 * MIB, "nvml-process")
    in_a_container = read_nvml_memory(FakeNvml(processes=[]), 0)  # NVML sees no process of ours
    size, source = context_now(0, reserved, in_a_container)
    assert size == 751 * MIB and source.startswith("nvml-device")
    v1 = read_nvml_memory(FakeNvml(driver_has_v2=False, processes=[]), 0)  # v1's used would count the reserve
    size, source = context_now(0, reserved, v1, mem_get_info=(142000 * MIB, 143771 * MIB))
    assert size == (143771 - 142000 - 272) * MIB and source.startswith("mem_get_info")
    assert context_now(0, reserved, v1) is None


def test_context_bound_by_capability_and_cuda_major_and_the_largest_row_when_unknown() -> None:
    hopper, why = context_bound((9, 0), 13)
    assert hopper >= 800 * MIB and "measured" in why
    for capability, cuda in (((8, 0), 12), (None, None), ((9, 0), None)):
        size, why = context_bound(capability, cuda)
        assert size >= hopper and "largest" in why


def test_budget_reserves_the_context_and_says_which_figure() -> None:
    from engine.budget.plan import resolve_budget
    from engine.core.config import load

    config = load(preset="demo", overrides={"budget": {"vram_gb": 8}, "runtime": {"device": "cuda"}})
    blind = resolve_budget(config, None)  # plan on a laptop: no device
    assert blind.reserve >= 750 * MIB and "context" in blind.describe() and "assumed" in blind.describe()
    h200 = DeviceInfo(type="cuda", name="NVIDIA H200", total=143771 * MIB, free=143000 * MIB, context=500 * MIB,
                      context_source="nvml-process", capability=(9, 0), cuda_major=13)
    before_steps = resolve_budget(config, h200)  # the guard: 500 MiB now, 640-780 once steps ran
    assert before_steps.reserve == 800 * MIB and "before the first step" in before_steps.reserve_source
    free = resolve_budget(load(preset="demo", overrides={"runtime": {"device": "cuda"}}), h200)
    assert free.reserve == 300 * MIB  # free memory was read after the context: only its growth is reserved
    nvml_only = DeviceInfo(type="cuda", name="NVIDIA H200", total=143771 * MIB, free=143000 * MIB,
                           capability=(9, 0), cuda_major=13)  # plan on the GPU box: no context of its own
    assert resolve_budget(load(preset="demo", overrides={"runtime": {"device": "cuda"}}), nvml_only).reserve \
        == 800 * MIB


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
    config = small(train={"batch_size": 8}, runtime={"device": "cuda"})
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
