"""Runtime memory measurement: what the device says, next to what was predicted, and the calibration between.

On CUDA a sample reads the caching allocator (``memory_allocated``,
``memory_reserved``, ``max_memory_allocated`` since the previous sample —
the peak counter is reset each time), its retry and OOM counters
(``memory_stats``: ``num_alloc_retries``, ``num_ooms``), and NVML's view of
the device. NVML's memory is read as ``nvidia-smi`` shows it: the v2 call
(``nvmlDeviceGetMemoryInfo(handle, version=nvmlMemory_v2)``) lists the
driver's reserved memory apart from ``used``; the v1 call, the only one older
bindings and drivers have, counts that reserve in ``used`` (615 MiB on an
H200: research/gpu-h200.md), so a v1 reading says so. NVML is optional
(engine.budget.nvml starts it, once a process): any failure means None.

The CUDA context, library handles and loaded kernels live outside the
allocator and grow during the first steps (the first matmul creates cuBLAS's
handle, kernels load lazily), so ``context_now`` is measured after the first
steps, not at start: the process's NVML usage minus ``memory_reserved`` where
NVML lists per-process usage; else NVML's device ``used`` (v2) minus
``memory_reserved``; else ``total − free − reserved`` from ``mem_get_info``
(both of which also count other processes; labelled as such). Before a step
(the start guard) or without a device (``plan``), ``context_bound`` gives the
figure by compute capability and CUDA major: measured rows, and the largest
of them for a device no row covers.

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

Torch is imported lazily; DeviceInfo, NvmlMemory and Calibration are plain data.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from engine.budget.nvml import binding as nvml_binding
from engine.budget.nvml import handle as nvml_handle

MIB = 1 << 20
#: Process memory outside PyTorch's allocator once training runs (CUDA context, library handles, loaded
#: kernels), by (compute capability major, CUDA major): (bytes, where the figure comes from). A bound over
#: what was measured; a device no row covers gets the largest row (``context_bound``). The ``gauges`` row
#: of ``python -m bench --gpu`` measures it on a new device.
CONTEXT_TABLE: dict[tuple[int, int], tuple[int, str]] = {
    (9, 13): (800 * MIB, "Hopper + CUDA 13, 640-780 MiB measured on an H200 "
                         "(docs/MEMORY.md, \"Budget, guard, planner\")"),
}
#: What a prediction reserves for the context when nothing better is known (the largest row).
DEFAULT_CONTEXT = max(v for v, _ in CONTEXT_TABLE.values())


def context_bound(capability: tuple[int, int] | None, cuda_major: int | None) -> tuple[int, str]:
    """(bytes, why) the context is assumed to take on a device of ``capability`` under CUDA ``cuda_major``:
    its table row, else the largest row (module docstring)."""
    row = CONTEXT_TABLE.get((capability[0], cuda_major)) if capability and cuda_major else None
    if row is not None:
        return row
    what = (f"sm {capability[0]}.{capability[1]}" if capability else "device unknown") + \
        (f" + CUDA {cuda_major}" if cuda_major else ", CUDA unknown")
    largest = max(CONTEXT_TABLE.values(), key=lambda row: row[0])
    return largest[0], f"{what}: no measured row, the largest one ({largest[1]})"


def cuda_major_of_torch() -> int | None:
    """The CUDA major this machine's torch was built for ('2.11.0+cu130' → 13), from its package metadata
    (torch not imported); None for a CPU build or no torch."""
    from importlib import metadata

    try:
        local = metadata.version("torch").partition("+")[2]
    except metadata.PackageNotFoundError:
        return None
    return int(local[2:-1]) if local.startswith("cu") and local[2:-1].isdigit() else None


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
    #: Where ``context`` came from: "nvml-process", "nvml-device" / "mem_get_info" (include other processes), "".
    context_source: str = ""
    #: CUDA compute capability (major, minor), when known.
    capability: tuple[int, int] | None = None
    #: CUDA major of the runtime torch uses (or NVML's driver), when known.
    cuda_major: int | None = None

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return asdict(self)


@dataclass(frozen=True)
class NvmlMemory:
    """NVML's memory view of one GPU (bytes; None where NVML did not say)."""

    #: Device memory in use as ``nvidia-smi`` shows it (v2: without the driver's reserve).
    used: int | None = None
    total: int | None = None
    #: The driver's reserved memory, listed apart by v2 (None from v1, whose ``used`` includes it).
    reserved: int | None = None
    free: int | None = None
    #: This process's usage from the running-process list (None where NVML cannot see the process).
    mine: int | None = None
    #: "v2", "v1" (used includes the driver's reserve) or "" (no reading).
    version: str = ""

    def note(self) -> str:
        """'' for a v2 reading; the caveat of a v1 one."""
        return "NVML v1: used includes the driver's reserved memory (nvidia-smi lists it apart)" \
            if self.version == "v1" else ""


def read_nvml_memory(nvml, handle) -> NvmlMemory:
    """One NVML memory reading through the binding ``nvml`` (pynvml or a stand-in): v2 where the binding and
    the driver have it, else v1, said so (module docstring). Torch-free; never raises."""
    info, version = None, ""
    v2 = getattr(nvml, "nvmlMemory_v2", None)
    if v2 is not None:
        try:
            info, version = nvml.nvmlDeviceGetMemoryInfo(handle, version=v2), "v2"
        except Exception:  # a driver without the v2 call, or a binding that does not take a version
            info = None
    if info is None:
        try:
            info, version = nvml.nvmlDeviceGetMemoryInfo(handle), "v1"
        except Exception:
            info = None
    mine = None
    try:
        for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == os.getpid() and proc.usedGpuMemory is not None:
                mine = int(proc.usedGpuMemory)
    except Exception:
        pass
    if info is None:
        return NvmlMemory(mine=mine)
    reserved = int(info.reserved) if version == "v2" else None
    return NvmlMemory(used=int(info.used), total=int(info.total), reserved=reserved, free=int(info.free),
                      mine=mine, version=version)


def nvml_memory(index: int = 0) -> NvmlMemory:
    """NVML's memory view of GPU ``index`` (all None without NVML). Torch-free."""
    handle = nvml_handle(index)
    return NvmlMemory() if handle is None else read_nvml_memory(nvml_binding(), handle)


def context_now(index: int, reserved: int, nvml: NvmlMemory | None = None,
                mem_get_info: tuple[int, int] | None = None) -> tuple[int, str] | None:
    """(bytes this process holds outside torch's allocator, where from), ``reserved`` being the allocator's
    bytes now (module docstring); None when nothing can say."""
    nvml = nvml if nvml is not None else nvml_memory(index)
    if nvml.mine is not None:
        return max(0, nvml.mine - reserved), "nvml-process"
    if nvml.used is not None and nvml.version == "v2":
        return max(0, nvml.used - reserved), "nvml-device (device used − torch reserved: other processes too)"
    if mem_get_info is not None:
        free, total = mem_get_info
        return max(0, total - free - reserved), "mem_get_info (total − free − reserved: other processes too)"
    return None


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
    context, source = context_now(index, reserved, mem_get_info=(free, total)) or (None, "")
    cuda = torch.version.cuda or ""
    return DeviceInfo(type="cuda", name=torch.cuda.get_device_name(index), total=int(total), free=int(free),
                      reserved=int(reserved), context=context, context_source=source,
                      capability=tuple(torch.cuda.get_device_capability(index)),
                      cuda_major=int(cuda.split(".")[0]) if cuda.split(".")[0].isdigit() else None)


def nvml_device_info(index: int = 0) -> DeviceInfo | None:
    """DeviceInfo from NVML alone (no torch, no CUDA context): what ``plan`` uses on a GPU box; None without NVML.

    Its ``context`` is None: this process has none, and the run's will come out of the free memory.
    """
    handle = nvml_handle(index)
    if handle is None:
        return None
    binding = nvml_binding()
    memory = read_nvml_memory(binding, handle)
    try:
        name = binding.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else str(name)
    except Exception:
        return None
    if memory.total is None:
        return None
    try:
        capability = tuple(int(v) for v in binding.nvmlDeviceGetCudaComputeCapability(handle))
    except Exception:
        capability = None
    cuda_major = cuda_major_of_torch()
    if cuda_major is None:
        try:
            cuda_major = int(binding.nvmlSystemGetCudaDriverVersion()) // 1000  # 13000 → 13: the driver's newest
        except Exception:
            cuda_major = None
    return DeviceInfo(type="cuda", name=name, total=memory.total, free=memory.free, capability=capability,
                      cuda_major=cuda_major)


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
    #: The driver's reserve NVML v2 lists apart from ``nvml_used`` (None from v1).
    nvml_reserved: int | None = None
    #: The caveat of the NVML reading ('' for v2).
    nvml_note: str = ""


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
        nvml = nvml_memory(dev.index or 0)
        return Sample(allocated=int(torch.cuda.memory_allocated(dev)), reserved=int(torch.cuda.memory_reserved(dev)),
                      peak=peak, peak_reserved=peak_reserved, retries=int(stats.get("num_alloc_retries", 0)),
                      ooms=int(stats.get("num_ooms", 0)), nvml_used=nvml.used, nvml_total=nvml.total,
                      nvml_reserved=nvml.reserved, nvml_note=nvml.note())


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
