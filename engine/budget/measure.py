"""Runtime memory measurement: what the device says, next to what was predicted, and the calibration between.

On CUDA a sample reads the caching allocator (``memory_allocated``,
``memory_reserved``, ``max_memory_allocated`` since the previous sample —
the peak counter is reset each time), its retry and OOM counters
(``memory_stats``: ``num_alloc_retries``, ``num_ooms``), and NVML's view of
the device (used / total; ``pynvml`` is optional, any failure means None).
The CUDA context and library workspaces live outside the allocator: the
process's NVML usage minus ``memory_reserved`` when NVML reports per-process
usage, else ``total − free − reserved`` from ``mem_get_info`` (which also
counts other processes; labelled as such).

On CPU there is no allocator counter that means "training memory" (process
RSS over-reads by ~125 MiB and mixes in the interpreter, the data and the
UI: research/memory.md), so the peak of a step is counted through the
dispatcher now and then (engine.budget.cpu_meter, driven by
engine.budget.hook) and RSS is reported beside it, never compared; the
device is the machine's RAM (total, available).

Calibration: after the first steps (the optimizer state exists from step 1
on), ``ratio = measured peak / predicted``. Later predictions become
``predicted × max(1, ratio) + overhead`` with overhead = allocator slack
(max reserved − max allocated) + context: a prediction is never lowered by a
measurement, only raised.

Torch is imported lazily; DeviceInfo and Calibration are plain data.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

#: Assumed CUDA context + cuBLAS/cuDNN workspace when it cannot be measured (bytes); typical 300-600 MiB.
DEFAULT_CONTEXT = 512 << 20


@dataclass(frozen=True)
class DeviceInfo:
    """What the budget needs to know about a device (bytes; None where unknown)."""

    #: "cpu" or "cuda".
    type: str = "cpu"
    #: Human name ("NVIDIA H200", "CPU").
    name: str = "CPU"
    #: Total device memory.
    total: int | None = None
    #: Free device memory now (after this process's context exists).
    free: int | None = None
    #: Bytes PyTorch's allocator of this process already holds (its own tensors and cache): usable by it too.
    reserved: int = 0
    #: Bytes this process holds outside PyTorch's allocator (context, workspaces), when measured.
    context: int | None = None
    #: Where ``context`` came from: "nvml-process", "mem_get_info" (includes other processes) or "".
    context_source: str = ""

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return asdict(self)


_NVML: dict[int, tuple] = {}


def _nvml_handle(index: int = 0):
    """(pynvml, handle) for GPU ``index``, initialised once per process; (None, None) without NVML."""
    if index not in _NVML:
        try:
            import pynvml

            pynvml.nvmlInit()
            _NVML[index] = (pynvml, pynvml.nvmlDeviceGetHandleByIndex(index))
        except Exception:
            _NVML[index] = (None, None)
    return _NVML[index]


def nvml_memory(index: int = 0) -> tuple[int | None, int | None, int | None]:
    """(used, total, this process's used) from NVML, each None when NVML cannot say. Torch-free."""
    nvml, handle = _nvml_handle(index)
    if handle is None:
        return None, None, None
    used = total = mine = None
    try:
        info = nvml.nvmlDeviceGetMemoryInfo(handle)
        used, total = int(info.used), int(info.total)
    except Exception:
        pass
    try:
        for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == os.getpid() and proc.usedGpuMemory is not None:
                mine = int(proc.usedGpuMemory)
    except Exception:
        pass
    return used, total, mine


def device_info(device=None) -> DeviceInfo:
    """DeviceInfo of a torch device (default: CUDA 0 if available, else CPU). Imports torch."""
    import torch

    if device is None:
        device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(device)
    if device.type != "cuda":
        from engine.budget.cpu_meter import available_ram

        free, total = available_ram()
        return DeviceInfo(total=total, free=free)
    index = device.index if device.index is not None else torch.cuda.current_device()
    free, total = torch.cuda.mem_get_info(index)
    reserved = torch.cuda.memory_reserved(index)
    _, _, mine = nvml_memory(index)
    if mine is not None:
        context, source = max(0, mine - reserved), "nvml-process"
    else:
        context, source = max(0, total - free - reserved), "mem_get_info"
    return DeviceInfo(type="cuda", name=torch.cuda.get_device_name(index), total=int(total), free=int(free),
                      reserved=int(reserved), context=int(context), context_source=source)


def nvml_device_info(index: int = 0) -> DeviceInfo | None:
    """DeviceInfo from NVML alone (no torch, no CUDA context): what ``plan`` uses on a GPU box; None without NVML."""
    nvml, handle = _nvml_handle(index)
    if handle is None:
        return None
    try:
        info = nvml.nvmlDeviceGetMemoryInfo(handle)
        name = nvml.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else str(name)
        return DeviceInfo(type="cuda", name=name, total=int(info.total), free=int(info.free))
    except Exception:
        return None


@dataclass(frozen=True)
class Sample:
    """One reading of the device's memory (bytes; None where the device has no such counter)."""

    allocated: int | None = None
    reserved: int | None = None
    peak: int | None = None
    peak_reserved: int | None = None
    retries: int | None = None
    ooms: int | None = None
    nvml_used: int | None = None
    nvml_total: int | None = None


class Meter:
    """Reads a device's memory counters; each ``read`` resets the peak so samples are per interval."""

    def __init__(self, device) -> None:
        import torch

        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"

    def read(self) -> Sample:
        """A Sample now (CPU: all None)."""
        if not self.cuda:
            return Sample()
        import torch

        dev = self.device
        stats = torch.cuda.memory_stats(dev)
        peak = int(torch.cuda.max_memory_allocated(dev))
        peak_reserved = int(torch.cuda.max_memory_reserved(dev))
        torch.cuda.reset_peak_memory_stats(dev)
        used, total, _ = nvml_memory(dev.index or 0)
        return Sample(allocated=int(torch.cuda.memory_allocated(dev)), reserved=int(torch.cuda.memory_reserved(dev)),
                      peak=peak, peak_reserved=peak_reserved, retries=int(stats.get("num_alloc_retries", 0)),
                      ooms=int(stats.get("num_ooms", 0)), nvml_used=used, nvml_total=total)


@dataclass(frozen=True)
class Calibration:
    """Measured vs predicted after the first steps, and what to add to later predictions (module docstring)."""

    predicted: int
    measured: int
    slack: int = 0
    context: int = 0

    @property
    def ratio(self) -> float:
        """measured / predicted (≤ 1 when the prediction was an upper bound)."""
        return self.measured / self.predicted if self.predicted else float("nan")

    @property
    def overhead(self) -> int:
        """Bytes a later prediction adds: allocator slack (reserved beyond allocated) and the context."""
        return self.slack + self.context

    def correct(self, predicted: int) -> int:
        """A later raw prediction, corrected: scaled up (never down) by the ratio, plus the overhead."""
        scale = max(1.0, self.ratio) if self.predicted else 1.0
        return int(predicted * scale) + self.overhead

    @classmethod
    def from_sample(cls, predicted: int, sample: Sample, context: int | None) -> "Calibration | None":
        """Calibration from a CUDA sample taken over the first steps; None when the device measures nothing."""
        if sample.peak is None:
            return None
        slack = max(0, (sample.peak_reserved or 0) - sample.peak)
        return cls(predicted=predicted, measured=sample.peak, slack=slack, context=int(context or 0))
