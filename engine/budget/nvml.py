"""NVML, the driver's management library (``pynvml``, from nvidia-ml-py), owned here for the whole process.

One place starts it: once, on the first question, under a lock (the system
sampler's thread and the training thread may ask at the same time), and each
GPU's handle is asked for once. Everything that reads a GPU through NVML asks
here: the memory budget's readings (engine.budget.measure), the system sampler
(engine.training.system) and the dashboard's process table
(tui.model.processes, read on every refresh: ``nvmlInit`` there each time
would cost a driver round trip a second).

NVML is optional. Without the package, a driver or a GPU, ``binding()`` is
None and every reading here says nothing (None, {}) instead of raising; a call
that fails once NVML runs says nothing for its own reading only. Torch-free.
"""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

_lock = threading.Lock()
#: The started binding (the pynvml module), None where NVML could not start; ``_unset`` before the first question.
_unset = object()
_binding: Any = _unset
#: GPU index → its NVML handle (None: NVML has no such GPU).
_handles: dict[int, Any] = {}


def binding() -> Any:
    """The started ``pynvml`` module, or None where NVML cannot start (no package, no driver)."""
    global _binding
    if _binding is _unset:
        with _lock:
            if _binding is _unset:
                try:
                    import pynvml

                    pynvml.nvmlInit()
                    _binding = pynvml
                except Exception:  # noqa: BLE001 - no package, no driver, a driver error: no NVML
                    _binding = None
    return _binding


def handle(index: int = 0) -> Any:
    """GPU ``index``'s NVML handle, or None (no NVML, or no such GPU)."""
    if index not in _handles:
        nvml = binding()
        with _lock:
            if index not in _handles:
                try:
                    _handles[index] = None if nvml is None else nvml.nvmlDeviceGetHandleByIndex(index)
                except Exception:  # noqa: BLE001 - no such GPU
                    _handles[index] = None
    return _handles[index]


def device_count() -> int:
    """How many GPUs NVML sees (0 without NVML)."""
    nvml = binding()
    try:
        return 0 if nvml is None else int(nvml.nvmlDeviceGetCount())
    except Exception:  # noqa: BLE001 - a driver error
        return 0


def gauges(index: int = 0) -> tuple[float | None, float | None, float | None]:
    """GPU ``index``'s (utilisation %, temperature °C, power W), each None where NVML does not say."""
    nvml, device = binding(), handle(index)
    if device is None:
        return None, None, None
    return (_ask(lambda: nvml.nvmlDeviceGetUtilizationRates(device).gpu),
            _ask(lambda: nvml.nvmlDeviceGetTemperature(device, nvml.NVML_TEMPERATURE_GPU)),
            _ask(lambda: nvml.nvmlDeviceGetPowerUsage(device) / 1000.0))


def memory_by_pid() -> dict[int, int]:
    """Device memory (bytes) per process id, summed over every GPU NVML sees ({} without NVML)."""
    nvml, out = binding(), {}
    for index in range(device_count()):
        device = handle(index)
        processes = _ask(partial(nvml.nvmlDeviceGetComputeRunningProcesses, device)) if device is not None else None
        for proc in processes or ():
            if proc.usedGpuMemory is not None:
                out[proc.pid] = out.get(proc.pid, 0) + int(proc.usedGpuMemory)
    return out


def shutdown() -> None:
    """Stop NVML and forget it and its handles; the next question starts it again (a test's fake binding, or a
    process done with its GPUs)."""
    global _binding
    with _lock:
        nvml, _binding = _binding, _unset
        _handles.clear()
    if nvml is not None and nvml is not _unset:
        _ask(nvml.nvmlShutdown)


def _ask(call) -> Any:
    """``call()``, or None when NVML fails it."""
    try:
        return call()
    except Exception:  # noqa: BLE001 - one reading NVML cannot give
        return None
