"""The Trainer: a task-agnostic loop over components that each own their config, state and policy.

- ``SampleOrder`` (engine.training.sample_order): which samples each step reads; rank-aware, resumable anywhere.
- ``Optimization`` (engine.optim.optimization): AdamW over the task's param groups, precision, schedule, clipping.
- ``NanPolicy`` / ``OomPolicy`` (engine.training.policies): non-finite steps, OOM back-off; each decision goes
  through ``agree`` (identity in one process, an all-reduce when distributed).
- ``Evaluator`` (engine.training.evaluator): validation passes, the best and abort rule, the overfit gate.
- ``Checkpointer`` (engine.checkpoint.manager; FSDP2's DCP directories: engine.checkpoint.sharded):
  cadence, save, prune, restore with validation, rollback (agreed across ranks); ``Weights``: the model's part.
- ``ControlHandler`` (engine.training.control_handler): viewers' requests at step boundaries, pause, stops.
- ``LiveSettings`` (engine.training.live_settings) and ``BudgetHook`` (engine.budget.hook): the live knobs and the
  memory prediction every change to them is judged by. ``Throughput``: tokens/s, MFU; ``Exporter``: exports.
- ``Autotuner`` (engine.training.autotune): the live search for the fastest settings that fit, at step boundaries.

The Trainer keeps the step count and assembles a checkpoint from its components' states; ``load``
validates all of it against the live model first, so a checkpoint loads whole or is skipped.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

import torch

from engine.budget.hook import BudgetHook
from engine.checkpoint import format as ckpt
from engine.checkpoint.manager import Checkpointer
from engine.checkpoint.sharded import ShardedCheckpointer
from engine.checkpoint.weights import Weights
from engine.core.config import RunConfig
from engine.core.exit_codes import ExitCode, Outcome
from engine.core.invocation import command
from engine.core.registry import get_spec, make_task
from engine.distributed.parallel import Single
from engine.optim import device as dev
from engine.optim.optimization import Optimization, accumulate, as_float
from engine.optim.readback import HostReadback, StepReadback, StepResult, deferred_readback
from engine.optim.schedule import warmup_steps
from engine.run import events as ev
from engine.run.control.requests import BuildInterrupted, Controls
from engine.run.rundir import RunDir
from engine.run.sinks import EventBus
from engine.training import batch_source, faults
from engine.training.autotune import Autotuner
from engine.training.compile import Compiler
from engine.training.control_handler import ControlHandler, GracefulStop, Stop
from engine.training.evaluator import Evaluator
from engine.training.exporter import Exporter
from engine.training.live_settings import LiveSettings
from engine.training.overfit_gate import OverfitGate
from engine.training.policies import CONTINUE_FLAGS, Agree, NanGuard, NanPolicy, OomPolicy, agree, eval_due
from engine.training.prefetch import step_keys, upcoming_keys
from engine.training.sample_order import SampleOrder
from engine.training.throughput import Throughput


class Trainer:
    """Trains ``config``'s task; emits events on ``bus``; obeys ``controls`` at step boundaries."""

    def __init__(self, config: RunConfig, bus: EventBus, controls: Controls | None = None,
                 checkpoint_dir: Path | None = None, resume: ckpt.Loaded | None = None, name: str = "",
                 run_dir: Path | None = None, on_step: Callable[[int], None] | None = None,
                 agree: Agree = agree, parallel: Single | None = None) -> None:
        """``on_step(step)`` is called after every step (the engine's status record); ``agree`` see policies;
        ``parallel`` is the strategy across processes (engine.distributed.parallel; default one process)."""
        self.parallel = parallel or Single()
        if parallel is not None and agree is globals()["agree"]:
            agree = parallel.agree
        self.config, self.bus, self.resume, self.run_dir, self.agree = config, bus, resume, run_dir, agree
        self.name, self.step = name or config.name, 0
        self.on_step = on_step or (lambda step: None)
        self._controls = controls or Controls()  # answered by the ControlHandler setup builds
        #: The test fault injector (SENSORLM_TUI_FAULTS); None in real runs. Each hook goes to its component.
        self.faults = faults.from_env()
        self.checkpoints = self._checkpointer(checkpoint_dir)
        self._pending: StepResult | None = None  # the last step's values, emitted after its checks
        self._ranks = None  # the distributed strategy's per-rank telemetry event, emitted with the step's

    def setup(self) -> None:
        """Seed, build task/model/optimizer on the device and the components around them, restore the checkpoint
        when resuming."""
        c = self.config
        ckpt.seed_all(c.train.seed)
        self.device = dev.resolve(c.runtime.device)
        self.task = make_task(c, self.faults)
        self.task.setup(self.resume.meta.get("task_state") if self.resume else None)
        overfit = c.evaluation.overfit
        self.order = SampleOrder(overfit or self.task.train_size(), c.train.seed, shuffle=not overfit,
                                 rank=self.parallel.rank, world=self.parallel.world,
                                 source="evaluation.overfit" if overfit else "data.train_samples")
        self.model = self.task.build_model().to(self.device)
        self._on_host = self.device.type == "cpu"  # batches are built on the host: no per-tensor .to() a step
        self.params = sum(p.numel() for p in self.model.parameters())
        # DDP: the same parameters, gradients synchronised; FSDP2 shards them in place, so before the optimizer.
        self.train_model = self.parallel.wrap(self.model, self.task.shard_units(self.model))
        self.weights = Weights.of(self)
        self.rates = Throughput(self.task, self.model, dev.describe(self.device), self.parallel.world)
        self.exporter = Exporter(self.task, Exporter.kinds(c.task.name, c.runtime.strategy),
                                 self.checkpoints.directory, self.bus.emit)
        t = c.train
        self.total_steps = t.max_steps or t.epochs * (t.steps_per_epoch or max(1, self.order.size // t.batch_size))
        self.optim = Optimization(c.optimizer, c.schedule, c.runtime.precision, self.model,
                                  self.task.param_groups(self.model), self.device, self.total_steps,
                                  self.faults and self.faults.lr_hook())
        self.checkpoints.bind(self.model, self.optim.optimizer)
        self._build_components()
        if self.resume:
            self.resume = self.checkpoints.restore(self.resume, self.load)
            self.autotune.resumed(self.resume.meta)  # one taken during a search: it starts again

    def _build_components(self) -> None:
        """The components around the model and optimizer, each from its own section and the few others it uses."""
        c = self.config
        self.settings = LiveSettings(c, self.task, self.model, self.optim)
        p = c.policies
        self.nan = NanPolicy(p.nan_policy, NanGuard(p.nan_patience), p.rollback_lr_factor, self.agree)
        self.oom = OomPolicy(p.oom_recovery, self.agree)
        # the abort rule is armed once the LR warm-up is done
        self.evaluator = Evaluator(c.evaluation, p, self.task, OverfitGate(c.evaluation, c.optimizer,
                                                                           c.runtime.precision),
                                   self.bus.emit, self.agree, warmup_steps(self.total_steps, c.schedule.warmup_frac))
        self.budget = BudgetHook(c, self.task, self.device, self.parallel)
        self.compiler = Compiler(c.runtime.compile, c.runtime.compile_backend, self.bus.emit)  # before the 1st step
        self.deferred = deferred_readback(c.runtime.step_readback, self.optim, self.device)
        self.readback = StepReadback(self.device) if self.deferred else HostReadback()
        # torch threads, data workers, depth: planned and measured
        self.prefetch = batch_source.planned_source(self.task, self.settings, lambda: self.total_steps - self.step,
                                                    self.bus.emit, pin_memory=self.device.type == "cuda")
        self.control = ControlHandler(self._controls, self.bus.emit, self, self.settings, self.budget, self.prefetch,
                                      self.device)
        owned = self.run_dir is not None and self.parallel.owner  # the rank that writes the run's config.toml
        self.autotune = Autotuner(c.autotune, self.settings, self.control, self.budget, self.prefetch, self.parallel,
                                  self, self.order, self.task.tokens_per_sample, self.bus.emit,
                                  RunDir(Path(self.run_dir)).write_config if owned else None,
                                  checkpoint=lambda: self.checkpoint(kind="autotune"))
        self.control.route("autotune", self.autotune.request)

    def _checkpointer(self, directory: Path | None) -> Checkpointer:
        """One file per save, or DCP directories when every rank writes its shard (the strategy declares which)."""
        hook = self.faults and self.faults.save_hook()
        if self.parallel.writes_shards:
            return ShardedCheckpointer(directory, self.config.checkpoint, self.bus.emit, self.parallel, hook)
        return Checkpointer(directory, self.config.checkpoint, self.bus.emit, hook)

    # ------------------------------------------------------------------ the loop
    def run(self) -> Outcome:
        """Train until done, aborted or failed. Never raises for control-flow reasons."""
        if not hasattr(self, "model"):
            self.setup()
        self._emit_started()
        try:
            if self.step == 0 and not self.resume:
                self.evaluate()
                self.checkpoint()
            self.control.set_state("running", "training")
            self.train_model = self.compiler.apply(self.train_model, self.task.compile_units(self.model), self.step)
            while self.step < self.total_steps:
                self.control.boundary()
                self.autotune.boundary()
                self.train_step()
                self.log_step()
                if eval_due(self.step, self.config.evaluation.every, self.total_steps):
                    self.evaluate()
                    if self.evaluator.abort_reason:  # its resume command turns the rule off (the reason says)
                        return self._finish("aborted", ExitCode.POLICY, self.evaluator.abort_reason, True,
                                            resume_tail=CONTINUE_FLAGS)
                    self.checkpoint()
                elif self.checkpoints.due(self.step):
                    self.checkpoint()
                if self.checkpoints.keeps_steps() and self.checkpoints.due(self.step):
                    self.checkpoint(which="step")
            self.control.boundary()  # requests that came during the last step still get their ack
            failed, reason = self.evaluator.overfit_verdict()
            return self._finish("finished", ExitCode.POLICY if failed else ExitCode.FINISHED, reason, False)
        except Stop as stop:
            return self._finish("interrupted", ExitCode.INTERRUPTED, str(stop) or "stopped now", False)
        except GracefulStop as stop:
            return self._finish(stop.status, stop.exit_code, stop.reason, stop.checkpoint)

    # ------------------------------------------------------------------ one step
    def train_step(self) -> None:
        """One optimizer step over batch_size samples in grad_accum micro-batches; an OOM retries smaller."""
        before = self.order.state_dict()
        indices = self.order.take(self.order.per_rank(self.settings.batch_size))
        while True:
            try:
                with self.budget.measure_step(self.step + 1):  # CPU: now and then, the step's true peak
                    return self._step_on(indices, time.perf_counter())
            except torch.OutOfMemoryError:
                accum = self.oom.backoff(self.settings.batch_size, self.settings.grad_accum)
                if accum is None:
                    self.order.load_state_dict(before)
                    raise
                self.optim.zero_grad()
                dev.release_cache(self.device)
                old, reason = self.settings.grad_accum, self.settings.smaller_micro_batches(accum)
                self.bus.emit(ev.SettingChanged(name="grad_accum", old=old, new=accum, step=self.step, reason=reason))
            except BuildInterrupted:  # a stop while the step's first batch was built (``_first_batch``)
                self.order.load_state_dict(before)
                self.prefetch.close(wait=False)  # a build on its thread or in a worker is left, not waited for
                self.control.boundary()  # raises that stop: the checkpoint holds the step before this one
                raise
            except Exception:
                self.order.load_state_dict(before)  # the failed step's samples are read again on resume
                raise

    def _keys(self, indices: list[int], step: int) -> list[tuple]:
        return step_keys(indices, self.settings.grad_accum, 0 if self.config.evaluation.overfit else step)

    def _upcoming(self, keys: list[tuple], done: int):
        """Every batch key after ``keys[:done]`` to the end of the run, at today's settings (lazy; nothing moves)."""
        return upcoming_keys(keys[done:], self.order.copy(), self.order.per_rank(self.settings.batch_size),
                             self.settings.grad_accum, self.step + 1, self.total_steps,
                             not self.config.evaluation.overfit)

    def _step_on(self, indices: list[int], started: float) -> None:
        self.optim.zero_grad()
        keys = self._keys(indices, self.step)
        total: torch.Tensor | None = None
        parts: dict[str, torch.Tensor] = {}
        for i, key in enumerate(keys):
            host = self._first_batch(key) if i == 0 else self.parallel.fetch(self.prefetch, key)
            if self.prefetch.depth:  # what comes next, built while this micro-batch trains
                self.prefetch.ahead(lambda i=i: self._upcoming(keys, i + 1))
            batch = host if self._on_host else {k: v.to(self.device, non_blocking=True) for k, v in host.items()}
            weight = len(key[0]) / len(indices)
            with self.parallel.sync(final=i == len(keys) - 1):  # DDP: gradients all-reduced on the last only
                with self.optim.autocast():
                    loss, components = self.task.loss(self.train_model, batch, self.step)
                self.optim.backward(loss if weight == 1.0 else loss * weight)
            total = accumulate(total, as_float(loss.detach()), weight)
            for name, value in components.items():
                parts[name] = accumulate(parts.get(name), as_float(value.detach()), weight)
        total, parts = self.parallel.mean_losses(total, parts)  # the job's loss, not this rank's share
        samples = len(indices) * self.parallel.world
        if self.deferred:  # no host sync: this step's values are read after the next one is queued
            values, lr = self.optim.step_on_device(self.step, total, parts)
            result = StepResult(self.step + 1, lr, 0.0, samples, parts=dict.fromkeys(parts))
        else:
            values = None
            (loss, grad_norm, read), lr, skipped = self.optim.step(self.step, total, parts, self.nan.skip_step)
            result = StepResult(self.step + 1, lr, 0.0, samples, loss, grad_norm, read, skipped)
        self.step += 1
        result.seconds = self._observe(started)
        done = self.readback.put(values, result)  # this step's (sync), the one before it (deferred)
        if done is not None:
            self._conclude(done)

    def _first_batch(self, key: tuple):
        """The step's first batch; a stop that comes while it is built gives the step up (engine.app.signals raises
        BuildInterrupted here): nothing of the step has run, so the checkpoint of the step before is exact. A
        later micro-batch's build is not given up: the forward passes before it moved the RNG and the model's
        buffers. Nor in a job of several processes, whose ranks must stop at the same step."""
        self._controls.building = self.parallel.world == 1
        try:
            return self.parallel.fetch(self.prefetch, key)
        finally:
            self._controls.building = False

    def _observe(self, started: float) -> float:
        """The step's wall seconds; the strategy's per-rank telemetry sees them (rank 0 gets an event)."""
        elapsed = max(time.perf_counter() - started, 1e-9)
        # on every rank (with its counted peak); rank 0 gets an event
        self._ranks = self.parallel.observe(self.step, started, elapsed, self.budget.last_peak)
        return elapsed

    def _conclude(self, result: StepResult) -> None:
        """A step's values are on the host: queue its event, count it for the NaN policy, act on the policy.

        Deferred (``self.readback``), this runs one step late, after the next step was queued. What that
        changes: when this step is the one that reaches ``nan_patience``, the next step has already run (from
        the last good weights: this one was skipped on the device). A rollback undoes it with everything
        else (model, optimizer, data position, RNG come from the checkpoint), so the run continues exactly
        as a synchronous one; a stop ends the run one step later (a stop saves nothing, so the files are the
        same). That step's event is logged before the rollback's, as it happened. Checkpoints, evaluations,
        controls and the run's end ``settle()`` first, so none of them acts before an earlier step's verdict.
        """
        self.log_step()  # an earlier step's event, if still queued, comes first
        self._pending = result
        decision = self.nan.record(result.skipped)
        if decision in ("stop", "rollback"):
            self.log_step()  # the failing step's event comes before the rollback's, in step order
            late = self.readback.flush()
            if late is not None:  # the step queued after it: logged as it happened, not counted (undone or final)
                self._pending = late
                self.log_step()
        event, stop = self.nan.respond(decision, result.step, self._rollback, self.optim)
        if stop:
            raise GracefulStop(stop, ExitCode.POLICY, checkpoint=False, status="failed")
        if event is not None:
            self.bus.emit(event)

    def settle(self) -> None:
        """Bring the host up to date: the deferred readback's last step read (a wait on its copy), counted and
        logged. A no-op on the synchronous path."""
        late = self.readback.flush()
        if late is not None:
            self._conclude(late)
        self.log_step()

    def _rollback(self) -> int | None:
        """Reload the newest good checkpoint (NanPolicy's rollback); the step it holds, None without one."""
        return None if self.checkpoints.rollback(self.load, self.parallel) is None else self.step

    def log_step(self) -> None:
        """Emit the last concluded step's event (its values came back in the step's one device sync, or deferred:
        one step later, without one)."""
        r = self._pending
        if r is None:
            return
        self._pending = None
        for event in self.compiler.report(r.step):  # before the step's own event: what its seconds went into
            self.bus.emit(event)
        self.on_step(r.step)
        self.autotune.observe(r.step, r.seconds, r.samples)
        if self._ranks is not None:
            self.bus.emit(self._ranks)
            self._ranks = None
        if r.step % self.config.train.log_every and r.step != self.total_steps and not r.skipped:
            return
        self.bus.emit(ev.StepLogged(
            step=r.step, epoch=self.order.epoch, loss=r.loss, lr=r.lr, grad_norm=r.grad_norm,
            batch_size=self.settings.batch_size, components=r.parts, skipped=r.skipped,
            **self.rates.rates(r.samples, r.seconds)))  # steps/s, samples/s, tokens/s: one step's, from one window
        sample = self.budget.sample(r.step)
        if sample is not None:
            self.bus.emit(sample)

    # ------------------------------------------------------------------ evaluation and checkpoints
    def evaluate(self) -> ev.EvalDone:
        """A validation pass (a stop asked for meanwhile cuts it short and raises); saves ``best`` on a new best."""
        self.settle()
        with self.compiler.eager():
            event = self.evaluator.run(self.model, self.step, self.settings.micro_batch, self.optim.autocast,
                                       self.device, self.control.stopping)
        if event is None:
            self.control.boundary()  # raises the stop that interrupted it
        self.bus.emit(event)
        if event.is_best and self.config.checkpoint.save_best and self.step > 0:
            self.checkpoint(which="best")
        return event

    def save_now(self, request_id: str | None) -> str | None:
        """A viewer's checkpoint-now: ``last`` written now, and the task's export beside it; the checkpoint's
        path, None when it failed."""
        path = self.checkpoint("manual", request_id=request_id)
        if path is not None:
            self.exporter.export(self.model, self.step, "manual")  # the task's export with it, if it has one
        return path

    def checkpoint(self, kind: str = "", request_id: str | None = None, which: str = "last") -> str | None:
        """Save ``which`` (last / best / step) now; its path, or None when it failed or there is no directory."""
        self.settle()
        before = self.control.state
        if before in ("running", "paused"):
            self.control.set_state("checkpointing", "writing checkpoint")
        try:
            return self.checkpoints.save(which, self.step, self.state_dict(), kind or which, request_id)
        finally:
            if self.control.state == "checkpointing":
                self.control.set_state(before, "checkpoint written")

    def state_dict(self) -> tuple[dict[str, torch.Tensor], dict]:
        """(tensors, JSON metadata) of the whole run, as one checkpoint holds it."""
        tensors, model_meta = self.weights.state_dict()  # only what trains, plus the frozen base's identity
        optim_tensors, optim_meta = self.optim.state_dict()
        rng_tensors, rng_meta = ckpt.rng_capture()
        live, config = self.autotune.recorded()  # during a search: the settings from before it, and a mark
        meta = {"step": self.step, **self.order.state_dict(), "world": self.parallel.world,
                **live, **self.autotune.state_dict(), **optim_meta,
                "total_steps": self.total_steps, "config": config.model_dump(mode="json"),
                "rng": rng_meta, "task_state": self.task.state_dict(), **self.evaluator.state_dict(),
                "nan": self.nan.state_dict(), "params": self.params, **model_meta}
        return {**tensors, **optim_tensors, **rng_tensors}, meta

    def load(self, loaded: ckpt.Loaded) -> None:
        """Check a checkpoint against this run (all of it before any loads), load it, verify its optimizer digest."""
        meta, tensors = loaded.meta, loaded.tensors
        ckpt.validate_meta(loaded)
        weights = self.checkpoints.weights(loaded, self.weights, self.optim)  # a file's shapes checked here
        try:
            order = SampleOrder.state_for_world(meta, self.parallel.world)
            self.order.check(order)
            ckpt.check_rng(tensors)
        except ValueError as exc:
            raise ckpt.CheckpointError(f"{loaded.path}: checkpoint metadata is incomplete or invalid ({exc})") \
                from None
        weights()
        self.optim.load_scalars(meta)
        ckpt.rng_restore(tensors, meta["rng"])
        self.order.load_state_dict(order)
        self.settings.load_state_dict(meta)
        self.evaluator.load_state_dict(meta)
        self.step, self.nan.guard = meta["step"], NanGuard(**meta["nan"])

    # ------------------------------------------------------------------ start / finish
    def _emit_started(self) -> None:
        self.bus.emit(ev.RunStarted(
            name=self.name, task=self.config.task.name, preset=self.config.task.preset,
            config=self.config.model_dump(mode="json"), params=self.params,
            trainable=sum(p.numel() for p in self.model.parameters() if p.requires_grad),
            train_samples=self.order.size, val_samples=len(self.task.val_indices()), device=self.device.type,
            device_name=dev.describe(self.device), budget=self.budget.on_start(self.settings),
            total_steps=self.total_steps, start_step=self.step, pid=os.getpid(),
            resumed_from=str(self.resume.path) if self.resume else None,
            capabilities=get_spec(self.config.task.name).capabilities.to_dict()))
        self.checkpoints.announce(self.resume, self.step)  # the files it skipped, the optimizer digest it checked

    def _finish(self, status: str, exit_code: int, reason: str, checkpoint: bool, resume_tail: str = "") -> Outcome:
        restored = self.autotune.close()  # during a search: the settings before it, before the batch source closes
        self.prefetch.close()
        self.compiler.close()
        try:
            self.settle()
        except GracefulStop as stop:  # the last step's verdict: a NaN stop wins over how the run was ending
            status, exit_code, reason, checkpoint = stop.status, stop.exit_code, stop.reason, stop.checkpoint
        path = None
        if (checkpoint or status == "finished") and (self.checkpoints.saved_last_at != self.step or restored):
            path = self.checkpoint(kind="final")
            if path is None and self.checkpoints.directory is not None:
                reason, exit_code = self.checkpoints.final_failed(reason), exit_code or ExitCode.POLICY
        self.control.set_state({"finished": "finished", "aborted": "aborted", "interrupted": "aborted"}
                               .get(status, "failed"), reason)
        reason = "; ".join(part for part in (reason, self.evaluator.end_note()) if part)  # a primary never finite
        outcome = Outcome(status, int(exit_code), reason, path or self.checkpoints.last_checkpoint)
        at = self.step if path else self.checkpoints.last_checkpoint_step
        resume = command("train", "--resume", self.run_dir) + resume_tail if status != "finished" and self.run_dir \
            else None
        self.bus.emit(ev.RunFinished(status=status, best=self.evaluator.abort.best, steps=self.step, reason=reason,
                                     checkpoint=outcome.checkpoint, checkpoint_step=at, resume_command=resume,
                                     exit_code=int(exit_code),
                                     export=self.exporter.final(self.model, self.step, status)))
        return outcome

