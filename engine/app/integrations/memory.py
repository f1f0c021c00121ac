"""Memory of someone else's training step: measured as the engine measures it, predicted when its step traces.

Measured: on CUDA the caching allocator and NVML (engine.budget.measure.Meter,
read at most every ``GPU_SAMPLE_S``; its peak counter is kept between reads,
so no peak is missed); on CPU the step's live tensor storages counted through
the dispatcher (engine.budget.cpu_meter.StepPeak) for the ``CALIBRATE_AT``-th
step this process runs (the second: a resumed run is measured at once too) and
every ``CPU_MEASURE_EVERY``-th step, the process RSS beside it. The same
cadences as the engine's hook (engine.budget.hook), for the same reasons, with
a floor in seconds (``COUNT_MIN_S``, ``CPU_SAMPLE_MIN_S``) for fast steps.

Predicted: when the integration can hand over the user's step (a
LightningModule's ``training_step`` with one real batch, or a callable and a
batch given to ``cockpit``), engine.budget.trace_step traces two optimizer
steps on fake tensors, plus ``HEADROOM``. Otherwise the summary's source is
"measured" and the memory panel says "measured only" instead of dashes.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

from engine.budget.hook import CALIBRATE_AT, CPU_EVERY, CPU_MEASURE_EVERY, CPU_SAMPLE_MIN_S, GPU_SAMPLE_S
from engine.core.estimate import BudgetSummary, Estimate
from engine.run import events as ev

#: Added to a traced step's peak. On CPU the trace reads the counted peak to within a few bytes (the scalars a
#: Lightning step's ``self.log`` keeps; tests/integrations/test_trace_step.py, bench.integrations), so with no
#: margin "never under" would be luck; it also covers kernel scratch and the CUDA allocator's 512-byte
#: rounding, inside the budget's +10 % contract.
HEADROOM = 0.02
#: At fast steps the step cadences above come too often for what they tell (a 1,500 steps/s run would count
#: a step three times a second and read RSS fifteen times): a counted step also waits this many seconds since
#: the last, and an RSS sample the hook's CPU_SAMPLE_MIN_S.
COUNT_MIN_S = 5.0


class StepMemory:
    """Measures the steps of one model on one device and keeps the prediction they are compared with."""

    def __init__(self, model, optimizer_of: Callable[[], Any], device) -> None:
        import torch

        from engine.budget.measure import Meter

        self.model = model
        self.optimizer_of = optimizer_of
        self.device = torch.device(device)
        self.meter = Meter(self.device)
        self.estimate: Estimate | None = None
        #: Why there is no prediction ("" once there is one).
        self.why = "no step handed over to trace"
        self._counting = None  # the StepPeak of the step being counted (CPU)
        self._last_peak: tuple[int, int] | None = None  # (step, bytes) of the last counted CPU step
        self._last_read = float("-inf")
        self._emitted_at = -1
        self._emitted_t = self._counted_t = float("-inf")  # monotonic seconds of the last RSS sample and count
        self._capacity: int | None = None  # the machine's RAM (CPU), read once
        #: The first step this process runs (``start_step + 1``; a resumed run's is not 1): the calibration
        #: step is counted from it, so a resume is measured on its first steps as a fresh run is.
        self.first_step: int | None = None

    # -- prediction ---------------------------------------------------------------------------
    def predict(self, loss_of, batch, zero_grad_after_forward: bool = False, loop_holds: bool = False) -> None:
        """Trace the user's step on ``batch`` (engine.budget.trace_step, whose docstring says what
        ``zero_grad_after_forward`` and ``loop_holds`` mean); a step that cannot be traced leaves ``why`` saying so
        and the run measured only."""
        from engine.budget.trace_step import StepTraceError, trace_step

        try:
            traced = trace_step(self.model, self.optimizer_of(), loss_of, batch,
                                zero_grad_after_forward=zero_grad_after_forward, loop_holds=loop_holds)
        except StepTraceError as exc:
            self.why = f"the step could not be traced ({exc})"
            return
        margin = int(traced.total * HEADROOM)
        self.estimate = Estimate(total=traced.total + margin, breakdown={**traced.breakdown, "headroom": margin},
                                 upper_bound=False, source="trace", seconds=traced.seconds)
        self.why = ""

    @property
    def predicted(self) -> int | None:
        """The predicted peak of a step (bytes), None when measured only."""
        return self.estimate.total if self.estimate is not None else None

    def summary(self) -> BudgetSummary:
        """RunStarted.budget: the prediction and the device, or source "measured" with the reason there is none."""
        from engine.budget.measure import device_info

        info = device_info(self.device)
        common = dict(capacity=info.total, free=info.free, context=info.context, device=info.type,
                      device_name=info.name)
        if self.estimate is None:
            return BudgetSummary(source="measured", note=f"measured only: {self.why}", **common)
        return BudgetSummary(predicted=self.estimate.total, source="trace", breakdown=dict(self.estimate.breakdown),
                             note=f"traced on fake tensors in {self.estimate.seconds:.1f} s "
                                  f"(+{HEADROOM:.0%} headroom)", **common)

    # -- measurement ---------------------------------------------------------------------------
    def counts(self, step: int) -> bool:
        """True when ``begin(step)`` starts counting storages (the first call names the first step)."""
        if self.first_step is None:
            self.first_step = step
        if self.meter.cuda or self._counting is not None:
            return False
        return step == self.first_step + CALIBRATE_AT - 1 or (step % CPU_MEASURE_EVERY == 0
                                                               and time.monotonic() - self._counted_t >= COUNT_MIN_S)

    def next_count(self, step: int) -> float:
        """The first step from ``step`` on whose ``begin`` may start counting (``math.inf`` on CUDA, which
        counts nothing): a caller whose steps come faster than a Python call is worth may skip ``begin`` before
        it. Before the first ``begin`` names the first step, every step may count."""
        if self.meter.cuda:
            return math.inf
        if self.first_step is None:
            return step
        calibrate = self.first_step + CALIBRATE_AT - 1
        if step <= calibrate:
            return calibrate
        return -(-step // CPU_MEASURE_EVERY) * CPU_MEASURE_EVERY

    def begin(self, step: int) -> None:
        """Before step ``step`` runs: on CPU, now and then, start counting its storages."""
        if not self.counts(step):
            return
        from engine.budget.cpu_meter import StepPeak, held_tensors

        self._counting = StepPeak(held_tensors(self.model, self.optimizer_of()))
        self._counted_t = time.monotonic()
        self._counting.__enter__()

    def end(self, step: int) -> ev.MemorySampled | None:
        """After step ``step``: a MemorySampled when there is something new to show, else None."""
        if self.meter.cuda:
            return self._cuda_sample(step)
        if self._counting is not None:
            counting, self._counting = self._counting, None
            counting.__exit__(None, None, None)
            self._last_peak = (step, counting.peak)
        elif self._emitted_at >= 0 and (step - self._emitted_at < CPU_EVERY
                                        or time.monotonic() - self._emitted_t < CPU_SAMPLE_MIN_S):
            return None
        return self._cpu_sample(step)

    def abandon(self) -> None:
        """A step that raised: stop counting (the dispatch mode must not outlive it)."""
        if self._counting is not None:
            counting, self._counting = self._counting, None
            counting.__exit__(None, None, None)

    def _cpu_sample(self, step: int) -> ev.MemorySampled:
        from engine.budget.cpu_meter import available_ram, rss

        if self._capacity is None:
            self._capacity = available_ram()[1]
        self._emitted_at, self._emitted_t = step, time.monotonic()
        peak = self._last_peak[1] if self._last_peak else None
        predicted = self.predicted
        source = (f"cpu: tensor storages of step {self._last_peak[0]} counted through the dispatcher; rss is the "
                  "process's, not training memory") if self._last_peak else "cpu: no step counted yet"
        return ev.MemorySampled(step=step, device="cpu", peak=peak, rss=rss(), capacity=self._capacity,
                                predicted=predicted, ratio=peak / predicted if peak and predicted else None,
                                source=source)

    def _cuda_sample(self, step: int) -> ev.MemorySampled | None:
        now = time.monotonic()
        if now - self._last_read < GPU_SAMPLE_S:
            return None
        self._last_read = now
        reading = self.meter.read()
        predicted = self.predicted
        return ev.MemorySampled(step=step, device="cuda", allocated=reading.allocated, reserved=reading.reserved,
                                peak=reading.peak, nvml_used=reading.nvml_used, capacity=reading.nvml_total,
                                predicted=predicted,
                                ratio=reading.peak / predicted if reading.peak and predicted else None,
                                source="cuda allocator")
