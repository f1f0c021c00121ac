"""System load sampler: CPU %, RAM and, where NVML answers, GPU utilisation, temperature and power.

NVML is optional (engine.budget.nvml owns it): without a driver or the
package every GPU field is None. Torch-free.
"""

from __future__ import annotations

import threading

import psutil

from engine.budget.nvml import gauges
from engine.run import events as ev


def sample() -> ev.SystemSampled:
    """One SystemSampled event now."""
    memory = psutil.virtual_memory()
    util, temp, power = gauges(0)
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
