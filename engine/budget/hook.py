"""The object the Trainer consults about memory: a budget summary at start, live-change checks, samples.

``BudgetHook(config, task, device, parallel)`` (engine.training.loop builds one per run):

- ``on_start(trainer) -> dict``: the summary for RunStarted.budget —
  predicted peak (analytic, or traced for tasks without a closed form), its
  breakdown, the budget and where it came from, device capacity and context,
  the largest batch that fits.
- ``predict_change(changes) -> dict``: the predicted peak, the budget, whether it
  fits and the refusal a real request would get (the tune modal's dry run).
- ``check_change(changes, force) -> str | None``: None when the run with
  ``changes`` (batch_size or a task's declared setting) is predicted to fit,
  or there is no budget, or ``force``; else the refusal with its numbers and
  the largest batch that would fit. A change predicted past the machine's
  own memory (device total, or RAM) is refused even when forced. The prediction is the calibrated one
  once the run has been measured (engine.budget.measure).
- ``measure_step(step)``: a context manager the Trainer wraps each step in.
  On CPU, for step CALIBRATE_AT, every CPU_MEASURE_EVERY-th step and the
  step after a change, it counts the step's live tensor storages through the
  dispatcher (engine.budget.cpu_meter.StepPeak): the step's true peak.
  Elsewhere it does nothing.
- ``sample(step) -> MemorySampled | None``: on CUDA the allocator and NVML
  next to the prediction (and, after the first two steps, the calibration
  ratio and the context measured then: engine.budget.measure.context_now,
  which the calibrated device total and the gauge use), at most every
  GPU_SAMPLE_S once calibrated (a read is ~0.2 ms of
  allocator stats and NVML: 4 % of a 5 ms step if done every step; the
  allocator's peak is kept between reads, so no peak is missed); on CPU the
  last measured peak and the process RSS next to the prediction and the
  budget (available RAM), emitted at once at the first call, after a change
  and after a count that found a new peak, and otherwise every CPU_EVERY
  steps or after a count, at most every CPU_SAMPLE_MIN_S (a 1,000 steps/s
  run would log ten samples a second, most of a long run's log, for a gauge
  drawn at 1 Hz; a count held back goes out at the first step past it).
  RSS is shown, not compared: it is not training memory.

The hook reads live settings from the trainer it was started with (its
config, batch_size and grad_accum change under controls and OOM recovery).
"""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext
from dataclasses import replace

from engine.budget import analytic
from engine.budget import plan as planner
from engine.budget.measure import Calibration, DeviceInfo, Meter, context_now, device_info
from engine.budget.settings import describe, table_of, with_settings, written
from engine.core.config import RunConfig
from engine.core.estimate import BudgetSummary
from engine.core.fmt import human
from engine.core.invocation import command
from engine.run import events as ev

#: CPU: emit a MemorySampled at least every this many steps.
CPU_EVERY = 100
#: CPU: ... and, when nothing changed, at most every this many seconds (the integrations keep the same floor).
CPU_SAMPLE_MIN_S = 0.5
#: CPU: count one step's storages in this many (a counted step costs ~2-4x a plain one on small models;
#: bench cpu_memory: the throughput cost stays under 1 %).
CPU_MEASURE_EVERY = 500
#: Steps before calibrating: the optimizer state appears at the first step, so the second is typical.
CALIBRATE_AT = 2
#: CUDA, once calibrated: seconds between allocator/NVML reads (a viewer draws the gauge at 1-2 Hz).
GPU_SAMPLE_S = 0.25


class BudgetHook:
    """See the module docstring."""

    def __init__(self, config: RunConfig, task, device, parallel=None) -> None:
        """``parallel``: the run's strategy across processes (engine.distributed.parallel), whose layout every
        prediction is made for (one rank's share of the batch, DDP's buckets); None: one plain process."""
        self.config = config
        self.task = task
        self.device = device
        self.parallel = parallel
        self.trainer = None
        self.info: DeviceInfo | None = None
        self.meter: Meter | None = None
        self.calibration: Calibration | None = None
        self._first_peak = 0
        self._last_emitted: tuple | None = None
        self._predicted_cache: tuple | None = None
        self._budget_cache: tuple | None = None  # (config, device info, its budget): resolved once per config
        self._last_read = float("-inf")
        self._cpu_emitted_t = float("-inf")  # when the last CPU sample was emitted (monotonic)
        self._count_unsent = False  # a counted peak no sample has carried yet (held back by CPU_SAMPLE_MIN_S)
        self._peak_sent: int | None = None  # the counted peak the last CPU sample carried
        self._cpu_peak: tuple[int, int] | None = None  # (step, bytes) of the last counted step
        self._settings_seen: tuple | None = None  # (config, batch, accumulation, calibration) at the last sample()
        self._measure_next = False
        #: The last step whose peak was counted (CPU): it ran 2-4x slower, so a timing leaves it out.
        self.counted_step = 0
        self._window: int | None = None  # the highest peak seen since open_window (None: no window open)

    # -- settings -------------------------------------------------------------------
    def _live(self) -> RunConfig:
        """The trainer's current settings (batch size and accumulation live on the trainer)."""
        t = self.trainer
        if t is None:
            return self.config
        cfg = getattr(t, "config", self.config)
        batch, accum = getattr(t, "batch_size", cfg.train.batch_size), getattr(t, "grad_accum", cfg.train.grad_accum)
        if (batch, accum) != (cfg.train.batch_size, cfg.train.grad_accum):
            cfg = with_settings(cfg, batch_size=batch, grad_accum=min(accum, batch))
        return cfg

    def _layout(self):
        """One rank of the trainer's job (engine.budget.layout); one plain process outside torchrun.

        From the strategy handed to the constructor: what ``on_start`` is given is the live settings, which
        know no strategy (reading it there predicted a 2-rank DDP run's rank as the whole one-process job)."""
        from engine.budget.layout import SINGLE, Layout

        parallel = self.parallel or getattr(self.trainer, "parallel", None)
        if parallel is None or getattr(parallel, "strategy", "single") == "single":
            return SINGLE
        return Layout(parallel.world, parallel.strategy)

    def _target(self) -> str:
        return "cuda" if getattr(self.device, "type", str(self.device)) == "cuda" else "cpu"

    def _predictor(self, config: RunConfig) -> planner.Predictor:
        """The planner's predictor for ``config`` on this run's device (its capability picks attention kernels)."""
        return planner.predictor_for(config, self._target(), self._layout(),
                                     planner.target_of(self._target(), self.info))

    def _predict_raw(self, config: RunConfig) -> int:
        cache = self._predicted_cache
        if cache and cache[0] is config:  # the same config object: skip the ~30 µs JSON key (every step)
            return cache[2]
        key = (config.task_config.model_dump_json(), config.train.batch_size, config.train.grad_accum,
               config.runtime.precision, config.runtime.prefetch, config.runtime.data_workers)
        if cache and cache[1] == key:
            self._predicted_cache = (config, key, cache[2])
            return cache[2]
        total = self._predictor(config)().total
        self._predicted_cache = (config, key, total)
        return total

    def _predict(self, config: RunConfig) -> int:
        raw = self._predict_raw(config)
        return self.calibration.correct(raw) if self.calibration else raw

    def _budget(self, config: RunConfig) -> planner.Budget | None:
        cache = self._budget_cache
        if cache is not None and cache[0] is config and cache[1] is self.info:  # every step: the same objects
            return cache[2]
        budget = planner.resolve_budget(config, self.info)
        self._budget_cache = (config, self.info, budget)
        return budget

    # -- the Trainer's interface ------------------------------------------------------
    def on_start(self, trainer) -> BudgetSummary:
        """Budget summary for RunStarted.budget (module docstring)."""
        self.trainer = trainer
        self.info = device_info(self.device)
        if self.info.type == "cpu" and getattr(trainer, "model", None) is not None:
            # The model's weights are already resident (and in the prediction): usable by the run, like CUDA's
            # reserved bytes, so not counted against it twice.
            from engine.budget.cpu_meter import held_tensors

            self.info = replace(self.info, reserved=_unique_bytes(held_tensors(trainer.model, None)))
        self.meter = Meter(self.device)
        config = self._live()
        budget = self._budget(config)
        if budget is None and not analytic.has_model(config):
            # Nothing to enforce and no closed form: do not spend seconds tracing for an informational number.
            self.meter = None
            return BudgetSummary(device=self.info.type, device_name=self.info.name,
                                 note=f"no memory model for task {config.task.name!r} and no budget: nothing "
                                      f"predicted (`{command('plan', '--task', config.task.name, '--trace')}` "
                                      "traces it)")
        predict = self._predictor(config)
        try:
            estimate = predict()
        except Exception as exc:  # a task whose trace fails must not stop the run; say why instead
            self.meter = None
            return BudgetSummary(budget=budget.bytes if budget else None, device=self.info.type,
                                 device_name=self.info.name, note=f"no prediction: {str(exc).splitlines()[0][:200]}")
        largest = None
        if budget is not None:
            largest = planner.largest_batch(predict, budget.bytes, grad_accum=config.train.grad_accum)
        note = ("CPU: no device budget to enforce; the numbers are predictions" if budget is None else
                ("fits" if estimate.total <= budget.bytes else "predicted NOT to fit"))
        return BudgetSummary(
            predicted=estimate.total, source=estimate.source, upper_bound=estimate.upper_bound,
            breakdown=dict(estimate.breakdown), settings=dict(estimate.settings),
            budget=budget.bytes if budget else None, budget_total=budget.total if budget else None,
            budget_source=budget.source if budget else None, safety=config.budget.safety,
            capacity=self.info.total, free=self.info.free, context=self.info.context,
            device=self.info.type, device_name=self.info.name, largest_batch=largest, note=note,
        )

    def peak_for(self, changes: dict) -> tuple[int | None, int | None]:
        """(predicted peak, budget bytes) of the run with ``changes``, by the same numbers ``predict_change``
        judges with (None where there is no prediction or no budget); ValueError for a value the config refuses."""
        proposed = self._proposed(changes)
        budget = self._budget(proposed)
        if self.trainer is None or self.meter is None:
            return None, budget.bytes if budget else None
        return self._predict(proposed), budget.bytes if budget else None

    def _proposed(self, changes: dict) -> RunConfig:
        current = self._live()
        table = table_of(current)  # the values were admitted at the engine's door: written, not judged again
        proposed = written(current, {k: v for k, v in changes.items() if table.affects_memory(k)}, table)
        if "batch_size" in changes and "grad_accum" not in changes:
            proposed = written(proposed, {"grad_accum": min(current.train.grad_accum, changes["batch_size"])}, table)
        return proposed

    def open_window(self) -> None:
        """Start measuring a window's peak (autotune's candidate): on CPU the next step is counted, on CUDA the
        allocator's peak counter restarts here; ``window_peak`` reads the highest peak since."""
        self._window = 0
        if self.meter is None:
            return
        if self.meter.cuda:
            self.meter.read()  # resets the allocator's peak counter
        else:
            self._measure_next = True

    def window_peak(self) -> int | None:
        """The highest step peak measured since ``open_window`` (None when nothing was measured)."""
        if self.meter is not None and self.meter.cuda and self._window is not None:
            self._window = max(self._window, self.meter.read().peak or 0)
        return self._window or None

    def predict_change(self, changes: dict) -> dict:
        """What a change would be judged by: {"predicted", "budget" (bytes or None), "fits", "why", "forceable"}.

        ``why`` is the refusal a real, unforced request would get ("" when it
        would apply). The tune modal's dry run and the real ``set`` both come
        here, so the advice and the refusal cannot disagree. ``forceable`` is
        False when the predicted peak exceeds the machine itself (the device's
        total, or the RAM of a CPU run): ``force`` passes the budget, never
        that (a forced batch of 10⁶, 40 GiB on a 23 GiB box, was applied).
        """
        current = self._live()
        try:
            proposed = self._proposed(changes)
        except Exception as exc:  # a bad value: the config's own one-line message
            return {"predicted": None, "budget": None, "fits": False, "why": str(exc)}
        budget = self._budget(proposed)
        if self.trainer is None or self.meter is None:
            return {"predicted": None, "budget": budget.bytes if budget else None, "fits": True, "why": ""}
        peak = self._predict(proposed)
        machine = self.info.total if self.info is not None else None
        if machine and peak > machine:
            what = ", ".join(f"{k} {describe(current).get(k)} → {v}" for k, v in changes.items())
            where = "RAM" if self.info.type == "cpu" else f"on {self.info.name}"
            return {"predicted": peak, "budget": budget.bytes if budget else None, "fits": False, "forceable": False,
                    "why": f"{what}: predicted peak {human(peak)} exceeds this machine's memory ({human(machine)} "
                           f"{where}); force passes the budget, never the machine"}
        if budget is None or peak <= budget.bytes:
            return {"predicted": peak, "budget": budget.bytes if budget else None, "fits": True, "why": ""}
        why = ""
        if proposed.budget.check:
            what = ", ".join(f"{k} {describe(current).get(k)} → {v}" for k, v in changes.items())
            largest = planner.largest_batch(lambda **kw: _Corrected(self, proposed, kw), budget.bytes,
                                            grad_accum=proposed.train.grad_accum)
            hint = f"; the largest batch that fits with it is {largest}" if largest else "; not even batch 1 fits"
            why = (f"{what}: predicted peak {human(peak)} > budget {budget.describe()}{hint} "
                   f"(send with force to apply anyway)")
        return {"predicted": peak, "budget": budget.bytes, "fits": False, "why": why}

    def check_change(self, changes: dict, force: bool) -> str | None:
        """None if the change is predicted to fit (or forced, or there is no budget); else the reason."""
        result = self.predict_change(changes)
        if (result["predicted"] is None and not result["fits"]) or result.get("forceable") is False:
            return result["why"]  # the value itself is bad, or more than the machine has: force does not apply it
        return None if force else (result["why"] or None)

    def measure_step(self, step: int):
        """Context for the Trainer's step ``step``: on CPU, now and then, the step's true peak (module docstring)."""
        if self.meter is None or self.meter.cuda or getattr(self.trainer, "model", None) is None:
            return nullcontext()
        if self.config.runtime.compile != "off":  # the count's dispatch mode would send dynamo back to eager for good
            return nullcontext()
        if not (step == CALIBRATE_AT or step % CPU_MEASURE_EVERY == 0 or self._measure_next):
            return nullcontext()
        self._measure_next = False
        return self._count(step)

    @contextmanager
    def _count(self, step: int):
        from engine.budget.cpu_meter import StepPeak, held_tensors

        meter = StepPeak(held_tensors(self.trainer.model, getattr(self.trainer, "optimizer", None)))
        with meter:
            yield
        self._cpu_peak, self.counted_step = (step, meter.peak), step
        if self._window is not None:
            self._window = max(self._window, meter.peak)
        if self.calibration is None and step >= CALIBRATE_AT:
            self.calibration = Calibration(predicted=self._predict_raw(self._live()), measured=meter.peak)

    @property
    def last_peak(self) -> int | None:
        """The newest counted peak bytes of a step on CPU (None on CUDA, which keeps its own maximum, and before
        the first count)."""
        return self._cpu_peak[1] if self._cpu_peak else None

    def _nothing_new_on_cpu(self, step: int) -> bool:
        """True when this CPU step cannot change what the last sample said: not a CPU_EVERY step, no peak
        counted at it or waiting to be sent, and the live settings and calibration are the very objects of the
        last call.

        A step between samples then costs four attribute reads, not the prediction and budget lookups
        (~12 µs a step inside a 1.4 ms training step, 0.8 % of it). Any change takes the full path, which
        compares the prediction itself and has the next step counted when it moved."""
        t = self.trainer
        seen = (getattr(t, "config", None), getattr(t, "batch_size", None), getattr(t, "grad_accum", None),
                self.calibration)
        last, self._settings_seen = self._settings_seen, seen
        if last is None or step % CPU_EVERY == 0 or self._counted_at(step) \
                or (self._count_unsent and self._cpu_floor_passed()):
            return False
        return seen[0] is last[0] and seen[1] == last[1] and seen[2] == last[2] and seen[3] is last[3]

    def _cpu_sample_due(self, step: int) -> bool:
        """With nothing changed, a CPU sample is due after a count that found a new peak, and every CPU_EVERY
        steps or after a count of the same peak at most every CPU_SAMPLE_MIN_S: a count held back by the floor
        goes out at the first step past it (module docstring)."""
        if self._counted_at(step):
            if self._cpu_peak[1] != self._peak_sent:
                return True
            self._count_unsent = True
        if step % CPU_EVERY and not self._count_unsent:
            return False
        return self._cpu_floor_passed()

    def _counted_at(self, step: int) -> bool:
        """Whether ``step`` is the step whose peak was counted last (measure_step)."""
        return self._cpu_peak is not None and self._cpu_peak[0] == step

    def _cpu_floor_passed(self) -> bool:
        return time.monotonic() - self._cpu_emitted_t >= CPU_SAMPLE_MIN_S

    def sample(self, step: int) -> ev.MemorySampled | None:
        """A MemorySampled for this step, or None when there is nothing new to say (CPU)."""
        if self.meter is None:
            return None
        if self.meter.cuda and self.calibration is not None:
            now = time.monotonic()
            if now - self._last_read < GPU_SAMPLE_S:
                return None
            self._last_read = now
        elif not self.meter.cuda and self._nothing_new_on_cpu(step):
            return None
        config = self._live()
        budget = self._budget(config)
        predicted = self._predict(config)
        if not self.meter.cuda:
            key = (predicted, budget.bytes if budget else None)
            if key != self._last_emitted and self._last_emitted is not None:
                self._measure_next = True  # a change: count the next step, it has a new peak
            measured = self._cpu_peak
            if key == self._last_emitted and not self._cpu_sample_due(step):
                return None
            self._last_emitted, self._cpu_emitted_t, self._count_unsent = key, time.monotonic(), False
            from engine.budget.cpu_meter import rss

            peak = self._peak_sent = measured[1] if measured else None
            return ev.MemorySampled(step=step, device="cpu", peak=peak, rss=rss(),
                                    capacity=self.info.total if self.info else None, predicted=predicted,
                                    budget=budget.bytes if budget else None,
                                    ratio=peak / predicted if peak and predicted else None,
                                    source=_cpu_source(measured, self.config.runtime.compile))
        reading = self.meter.read()
        if self._window is not None:
            self._window = max(self._window, reading.peak or 0)
        if self.calibration is None:
            self._first_peak = max(self._first_peak, reading.peak or 0)
            if step >= CALIBRATE_AT:
                self._measure_context(reading.reserved or 0)
                raw = self._predict_raw(config)
                self.calibration = Calibration.from_sample(
                    raw, replace(reading, peak=self._first_peak), self.info.context)
                predicted = self._predict(config)
        notes = [f"{reading.retries} alloc retries, {reading.ooms} OOMs"] if reading.retries or reading.ooms else []
        notes += [reading.nvml_note] if reading.nvml_note else []
        return ev.MemorySampled(
            step=step, device="cuda", allocated=reading.allocated, reserved=reading.reserved, peak=reading.peak,
            nvml_used=reading.nvml_used, capacity=self.info.total if self.info else reading.nvml_total,
            predicted=predicted, budget=budget.bytes if budget else None,
            ratio=self.calibration.ratio if self.calibration else None,
            source="; ".join(["cuda allocator", *notes]), nvml_reserved=reading.nvml_reserved,
            context=self.info.context if self.calibration else None)

    def _measure_context(self, reserved: int) -> None:
        """The process's memory outside the allocator, now that the first steps made their handles and loaded
        their kernels (engine.budget.measure.context_now); kept in the device info the budget and the
        calibration read."""
        import torch

        index = self.meter.device.index or 0
        measured = context_now(index, reserved, mem_get_info=torch.cuda.mem_get_info(index))
        if measured is not None:
            self.info = replace(self.info, context=measured[0], context_source=f"{measured[1]}, after the first steps")


def _cpu_source(measured: tuple[int, int] | None, compile_mode: str) -> str:
    """What a CPU memory sample's peak is (the count, or why there is none)."""
    if measured:
        return (f"cpu: tensor storages of step {measured[0]} counted through the dispatcher; rss is the "
                "process's, not training memory")
    if compile_mode != "off":
        return ("cpu: predicted for an eager step; compiled steps are not counted (inductor's buffers bypass the "
                "dispatcher, and a dispatch mode around a compiled step sends it back to eager)")
    return "cpu: predicted; no step counted yet"


def _unique_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors``."""
    seen = {t.untyped_storage()._cdata: t.untyped_storage().nbytes() for t in tensors}
    return sum(seen.values())


class _Corrected:
    """An Estimate-like total: the hook's calibrated prediction for ``config`` with ``settings``."""

    def __init__(self, hook: BudgetHook, config: RunConfig, settings: dict) -> None:
        kw = {k: v for k, v in settings.items() if k in ("batch_size", "grad_accum")}
        self.total = hook._predict(with_settings(config, **kw))
