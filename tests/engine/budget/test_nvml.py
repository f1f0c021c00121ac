"""engine.budget.nvml owns NVML: every reader (the budget's memory readings, the system sampler, the dashboard's
process table) goes through it, NVML starts once a process, and without it every reading is empty, never a crash.

CPU: a stand-in ``pynvml`` module in sys.modules, the binding NVML's users import. GPU: the real driver."""

from __future__ import annotations

import os
import sys
import threading
from types import SimpleNamespace

import pytest

from engine.budget import nvml
from engine.budget.measure import NvmlMemory, nvml_device_info, nvml_memory
from engine.training.system import sample
from tui.model.processes import ProcessTable

MIB = 1 << 20


class FakeBinding:
    """pynvml as two GPUs answer it; counts how often NVML is started."""

    NVML_TEMPERATURE_GPU = 0
    nvmlMemory_v2 = 0x02000028

    def __init__(self, broken: tuple[str, ...] = ()) -> None:
        self.inits = 0
        self.broken = broken
        self.lock = threading.Lock()

    def _check(self, name: str) -> None:
        if name in self.broken:
            raise RuntimeError(f"NVML_ERROR_NOT_SUPPORTED: {name}")

    def nvmlInit(self) -> None:
        self._check("nvmlInit")
        with self.lock:
            self.inits += 1

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int):
        if index >= 2:
            raise RuntimeError("NVML_ERROR_INVALID_ARGUMENT")
        return f"gpu{index}"

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=97 if handle == "gpu0" else 3)

    def nvmlDeviceGetTemperature(self, handle, sensor):
        self._check("nvmlDeviceGetTemperature")
        return 50

    def nvmlDeviceGetPowerUsage(self, handle):
        return 300_000

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        return SimpleNamespace(total=143771 * MIB, reserved=615 * MIB, free=142000 * MIB, used=1156 * MIB)

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        # this process on both GPUs, another one on the second
        return [SimpleNamespace(pid=os.getpid(), usedGpuMemory=1023 * MIB)] + \
            ([SimpleNamespace(pid=1, usedGpuMemory=10 * MIB)] if handle == "gpu1" else [])

    def nvmlDeviceGetName(self, handle):
        return b"NVIDIA H200"

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return (9, 0)

    def nvmlSystemGetCudaDriverVersion(self):
        return 13000


@pytest.fixture
def binding(request, monkeypatch):
    """Installs the stand-in (or None: the package is missing) as ``pynvml`` with NVML not started; after the test
    NVML is forgotten again, so the real binding (if any) is what the next test meets."""
    fake = FakeBinding(*getattr(request, "param", ((),)))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    nvml.shutdown()
    yield fake
    nvml.shutdown()


def test_every_reader_shares_one_nvml_started_once(binding) -> None:
    readers = [lambda: nvml_memory(0), lambda: nvml_device_info(1), sample, lambda: ProcessTable(os.getpid()).rows()]
    threads = [threading.Thread(target=reader) for reader in readers * 3]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for reader in readers:
        reader()
    assert binding.inits == 1


def test_the_readings_come_through_the_one_binding(binding) -> None:
    assert nvml.gauges(0) == (97, 50, 300.0) and nvml.gauges(1)[0] == 3
    assert nvml.memory_by_pid() == {os.getpid(): 2046 * MIB, 1: 10 * MIB}
    event = sample()
    assert (event.gpu_util, event.gpu_temp_c, event.gpu_power_w) == (97, 50, 300.0)
    row = next(row for row in ProcessTable(os.getpid()).rows() if row.pid == os.getpid())
    assert row.gpu_memory == 2046 * MIB
    info = nvml_device_info(0)
    assert (info.name, info.total, info.capability, info.cuda_major) == ("NVIDIA H200", 143771 * MIB, (9, 0), 13)
    assert nvml.gauges(2) == (None, None, None) and nvml.handle(2) is None  # no third GPU


@pytest.mark.parametrize("binding", [(("nvmlDeviceGetTemperature",),)], indirect=True)
def test_a_reading_nvml_cannot_give_is_none_and_the_others_stand(binding) -> None:
    assert nvml.gauges(0) == (97, None, 300.0)


@pytest.mark.parametrize("binding", [(("nvmlInit",),)], indirect=True)
def test_no_driver_means_no_readings_and_no_crash(binding) -> None:
    assert nvml.binding() is None and nvml.device_count() == 0 and nvml.handle(0) is None
    assert nvml.gauges(0) == (None, None, None) and nvml.memory_by_pid() == {}
    assert nvml_memory(0) == NvmlMemory() and nvml_device_info(0) is None
    event = sample()
    assert (event.gpu_util, event.gpu_temp_c, event.gpu_power_w) == (None, None, None) and event.ram_total > 0


def test_no_package_means_no_readings_and_no_crash(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    nvml.shutdown()
    try:
        assert nvml.binding() is None and nvml.memory_by_pid() == {} and nvml.gauges(0) == (None, None, None)
        assert all(row.gpu_memory is None for row in ProcessTable(os.getpid()).rows())
    finally:
        nvml.shutdown()


@pytest.mark.gpu
def test_on_a_gpu_nvml_answers_for_this_process() -> None:
    import torch

    torch.ones(1, device="cuda")  # this process now holds a CUDA context NVML can see
    assert nvml.binding() is not None and nvml.device_count() >= 1 and nvml.handle(0) is not None
    util, temp, power = nvml.gauges(0)
    assert util is not None and 0 <= util <= 100 and temp is not None and power is not None and power > 0
    mine = nvml.memory_by_pid().get(os.getpid())
    assert mine is None or mine > 0  # a container's NVML may not see its own pids
    assert nvml_memory(0).total > 0 and nvml_device_info(0).total == nvml_memory(0).total
