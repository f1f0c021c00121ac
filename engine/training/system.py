"""System load sampler: CPU %, RAM and, where NVML answers, GPU utilisation, temperature and power.

NVML (``pynvml`` from nvidia-ml-py) is optional: without a driver or the
package every GPU field is None. Its memory reading is the budget's
(engine.budget.measure.read_nvml_memory: ``used`` as nvidia-smi shows it, the
driver's reserve apart). Torch-free.
"""

from __future__ import annotations

import threading

import psutil

from engine.budget.measure import read_nvml_memory
from engine.run import events as ev


class _Nvml:
    """Lazy NVML handle for GPU 0; every failure means 'no GPU numbers', never an exception."""

    def __init__(self) -> None:
        self.handle = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            self.nvml = pynvml
        except Exception:
            self.handle = None

    def read(self) -> tuple[float | None, float | None, float | None, int | None]:
        """(utilisation %, temperature °C, power W, memory used bytes as nvidia-smi shows it) or Nones."""
        if self.handle is None:
            return None, None, None, None
        n = self.nvml
        out = []
        for fn in (lambda: n.nvmlDeviceGetUtilizationRates(self.handle).gpu,
                   lambda: n.nvmlDeviceGetTemperature(self.handle, n.NVML_TEMPERATURE_GPU),
                   lambda: n.nvmlDeviceGetPowerUsage(self.handle) / 1000.0,
                   lambda: read_nvml_memory(n, self.handle).used):
            try:
                out.append(fn())
            except Exception:
                out.append(None)
        return tuple(out)


_nvml: _Nvml | None = None


def nvml() -> _Nvml:
    """The process-wide NVML reader (initialised on first use)."""
    global _nvml
    if _nvml is None:
        _nvml = _Nvml()
    return _nvml


def sample() -> ev.SystemSampled:
    """One SystemSampled event now."""
    memory = psutil.virtual_memory()
    util, temp, power, _ = nvml().read()
    return ev.SystemSampled(cpu_percent=psutil.cpu_percent(interval=None), ram_used=memory.total - memory.available,
                            ram_total=memory.total, gpu_util=util, gpu_temp_c=temp, gpu_power_w=power)


class SystemSampler:
    """Background thread emitting SystemSampled every ``interval`` seconds."""

    def __init__(self, emit, interval: float = 2.0) -> None:
        self.emit = emit
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="system-sampler", daemon=True)

    def start(self) -> "SystemSampler":
        """Start sampling."""
        psutil.cpu_percent(interval=None)  # primes the counter: the first reading is otherwise 0.0
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.emit(sample())
            except Exception:
                pass

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()
