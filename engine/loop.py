"""The Trainer: a task-agnostic training loop with controls, evals, checkpoints and events.

The loop body (``run``) reads top to bottom in one screen; everything with a
policy lives elsewhere (engine.policies, engine.budget, engine.checkpoint) and
each step's mechanics are in small methods below it.

Data order: one seeded permutation of the training set per epoch; the data
position is a sample offset into it, so changing the batch size neither
replays nor skips samples, and resume restores (epoch, position) exactly.
"""

from __future__ import annotations

import gc
import math
import random
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine import checkpoint as ckpt
from engine import events as ev
from engine import threads
from engine.config import RunConfig
from engine.control import Controls, Request
from engine.policies import AbortPolicy, CheckpointPolicy, NanGuard, eval_due
from engine.prefetch import build_batch
from engine.schedule import lr_at
from engine.sinks import EventBus
from engine.tasks import make_task
from engine.tasks.base import Task, TaskError

#: Exit codes of the engine (headless CLI and engine process).
EXIT_FINISHED, EXIT_POLICY, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130

#: NaN rollbacks to the same checkpoint in a row before the run stops: data that is NaN at a fixed
#: position replays identically after every rollback, and without a cap the run would loop forever.
MAX_ROLLBACKS_TO_ONE_STEP = 3

#: Largest training set the loop accepts: each epoch's order is a permutation held in memory (8 bytes a sample,
#: 800 MB here); a typo like data.train_samples = 1e12 must be a one-line error, not a 7 TiB MemoryError mid-run.
MAX_TRAIN_SAMPLES = 100_000_000


class _Stop(Exception):
    """Internal: leave the loop now (abort-now, second SIGINT)."""


class _EvalInterrupted(Exception):
    """Internal: a graceful stop arrived during evaluation; checkpoint without finishing it."""


@dataclass
class Outcome:
    """How a run ended: status (finished / aborted / failed / interrupted), exit code, reason."""

    status: str
    exit_code: int
    reason: str = ""
    checkpoint: str | None = None


class _NoBudget:
    """Fallback when engine.budget is unavailable: nothing predicted, every change fits."""

    def on_start(self, trainer: "Trainer") -> dict:
        return {}

    def check_change(self, changes: dict, force: bool) -> str | None:
        return None

    def sample(self, step: int) -> ev.MemorySampled | None:
        return None

    def measure_step(self, step: int):
        return nullcontext()


def _make_budget(config: RunConfig, task: Task, device: torch.device):
    try:
        from engine.budget.hook import BudgetHook
    except ImportError:
        return _NoBudget()
    return BudgetHook(config, task, device)


class Trainer:
    """Trains ``config``'s task; emits events on ``bus``; obeys ``controls`` at step boundaries."""

    def __init__(self, config: RunConfig, bus: EventBus, controls: Controls | None = None,
                 checkpoint_dir: Path | None = None, resume: ckpt.Loaded | None = None,
                 name: str = "", run_dir: Path | None = None) -> None:
        self.config = config
        self.bus = bus
        self.controls = controls or Controls()
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.name = name or config.name
        self.run_dir = run_dir
        self.resume = resume
        t = config.train
        self.batch_size = t.batch_size
        self.grad_accum = t.grad_accum
        self.lr_scale = 1.0  # peak-LR multiplier from `set lr` and NaN rollbacks
        self.peak_lr = t.lr
        self.step = 0
        self.epoch = 0
        self.position = 0  # samples consumed in the current epoch's permutation
        self.state = "starting"
        self.abort_policy = AbortPolicy(t.abort_drop_db, t.abort_patience)
        self.nan_guard = NanGuard(t.nan_patience)
        self.ckpt_policy = CheckpointPolicy(config.checkpoint.every_steps, config.checkpoint.keep_last)
        self.first_val_loss: float | None = None
        self.last_val_loss: float | None = None
        self._order_cache: tuple[int, np.ndarray] | None = None
        self._pending_loss: tuple | None = None  # the last step's values, emitted after its checks
        self.last_checkpoint: str | None = None
        self._abort_reason = ""
        self._saved_last_at = -1
        self._save_error = ""  # the last checkpoint write error (said again if the final save fails)
        self._should_abort = False
        self._rollback_point = (-1, 0)  # (step last rolled back to, rollbacks to it in a row)

    # ------------------------------------------------------------------ set-up
    def setup(self) -> None:
        """Seed, build task/model/optimizer on the device, restore a checkpoint if resuming."""
        from engine import device as dev

        t = self.config.train
        random.seed(t.seed)
        np.random.seed(t.seed % 2**32)
        torch.manual_seed(t.seed)
        self.device = dev.resolve(t.device)
        self.task: Task = make_task(self.config)  # also attaches the test fault hook (engine.tasks.faults)
        self.task.setup(self.resume.meta.get("task_state") if self.resume else None)
        if self._train_n() > MAX_TRAIN_SAMPLES:
            raise TaskError(f"data.train_samples={self._train_n():,}: at most {MAX_TRAIN_SAMPLES:,} (each epoch's "
                            "sample order is held in memory)")
        self.model = self.task.build_model().to(self.device)
        self.params = sum(p.numel() for p in self.model.parameters())
        decay = [p for p in self.model.parameters() if p.ndim >= 2]
        no_decay = [p for p in self.model.parameters() if p.ndim < 2]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": t.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=t.lr, betas=tuple(t.betas), eps=t.eps)
        fp16 = t.precision == "fp16"
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=fp16)
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(t.precision)
        self.autocast = (lambda: torch.autocast(self.device.type, dtype=dtype)) if dtype else nullcontext
        self.total_steps = t.max_steps or t.epochs * (t.steps_per_epoch or max(1, self._train_n() // self.batch_size))
        self.budget = _make_budget(self.config, self.task, self.device)
        self.prefetch = threads.prefetcher_for(self)  # torch threads, data workers, depth: planned and measured
        if self.resume:
            self._restore(self.resume)

    def _train_n(self) -> int:
        return self.config.train.overfit or self.task.train_size()

    # ------------------------------------------------------------------ the loop
    def run(self) -> Outcome:
        """Train until done, aborted or failed. Never raises for control-flow reasons."""
        if not hasattr(self, "model"):
            self.setup()
        self._emit_started()
        try:
            if self.step == 0 and not self.resume:
                self._evaluate()
                self._checkpoint("last")
            self._set_state("running", "training")
            while self.step < self.total_steps:
                self._boundary()
                self._train_step()
                self._log_pending()
                if eval_due(self.step, self.config.train.eval_every, self.total_steps):
                    if self._evaluate_and_judge():
                        return self._finish("aborted", EXIT_POLICY, self._abort_reason, checkpoint=True)
                    self._checkpoint("last")
                elif self.ckpt_policy.due(self.step):
                    self._checkpoint("last")
                if self.ckpt_policy.keep_last and self.ckpt_policy.due(self.step):
                    self._checkpoint("step")
            self._boundary()  # requests that came during the last step still get their ack
            return self._finish("finished", self._overfit_exit(), self._overfit_reason(), checkpoint=False)
        except _Stop as stop:
            return self._finish("interrupted", EXIT_INTERRUPTED, str(stop) or "stopped now", checkpoint=False)
        except _GracefulStop as stop:
            return self._finish(stop.status, stop.exit_code, stop.reason, checkpoint=stop.checkpoint)

    # ------------------------------------------------------------------ one step
    def _indices(self, count: int) -> list[int]:
        """Next ``count`` sample indices in epoch order, crossing into the next epoch as needed."""
        out: list[int] = []
        while len(out) < count:
            order = self._epoch_order(self.epoch)
            take = order[self.position: self.position + count - len(out)]
            out.extend(int(i) for i in take)
            self.position += len(take)
            if self.position >= len(order):
                self.epoch, self.position = self.epoch + 1, 0
        return out

    def _peek_steps(self, steps: int) -> list[list[int]]:
        """The indices of each of the next ``steps`` steps (at the current batch size), without consuming them."""
        epoch, position = self.epoch, self.position
        try:
            return [self._indices(self.batch_size) for _ in range(steps)]
        finally:
            self.epoch, self.position = epoch, position

    def _upcoming(self, keys: list[tuple], done: int) -> list[tuple]:
        """Keys of the micro-batches after ``keys[:done]``: the rest of this step's, then the next steps'."""
        ahead = list(keys[done:])
        depth = self.prefetch.depth
        if len(ahead) < depth:
            later = min(-(-(depth - len(ahead)) // len(keys)), self.total_steps - self.step - 1)
            for s, indices in enumerate(self._peek_steps(max(0, later)), start=1):
                ahead += [(tuple(c.tolist()), self._mask_step(self.step + s)) for c in self._chunks(indices)]
        return ahead[:depth]

    def _build_batch(self, key: tuple) -> dict:
        return build_batch(self.task, key)

    def _mask_step(self, step: int) -> int:
        """The step a batch's masks are drawn for: the step itself, or 0 for the frozen overfit samples."""
        return 0 if self.config.train.overfit else step

    def _chunks(self, indices) -> list[np.ndarray]:
        if self.grad_accum == 1:  # np.array_split costs ~20 µs a call: a tenth of a fast step's own budget
            return [np.asarray(indices)]
        return [c for c in np.array_split(np.asarray(indices), self.grad_accum) if len(c)]

    def _epoch_order(self, epoch: int) -> np.ndarray:
        if self._order_cache is None or self._order_cache[0] != epoch:
            n = self._train_n()
            if self.config.train.overfit:
                order = np.arange(n)  # the frozen samples, always in the same order
            else:
                order = np.random.default_rng((self.config.train.seed, epoch)).permutation(n)
            self._order_cache = (epoch, order)
        return self._order_cache[1]

    def _train_step(self) -> None:
        """One optimizer step over batch_size samples in grad_accum micro-batches; OOM halves the micro-batch."""
        start_epoch, start_position = self.epoch, self.position
        indices = self._indices(self.batch_size)
        while True:
            try:
                with self.budget.measure_step(self.step + 1):  # CPU: now and then, the step's true peak
                    self._forward_backward(indices, time.perf_counter())
                return
            except torch.OutOfMemoryError:
                if not self.config.train.oom_recovery or self.grad_accum >= self.batch_size:
                    raise
                self._recover_from_oom()
            except Exception:
                self.epoch, self.position = start_epoch, start_position
                raise

    def _forward_backward(self, indices: list[int], started: float) -> None:
        t = self.config.train
        self.optimizer.zero_grad(set_to_none=True)
        batch_step = self._mask_step(self.step)
        total_loss: torch.Tensor | None = None
        components: dict[str, torch.Tensor] = {}
        chunks = self._chunks(indices)
        keys = [(tuple(c.tolist()), batch_step) for c in chunks]
        for i, (chunk, key) in enumerate(zip(chunks, keys)):
            weight = len(chunk) / len(indices)
            host = self.prefetch.take(key)
            if self.prefetch.depth:  # the guess for what comes next, built while this micro-batch trains
                self.prefetch.ahead(self._upcoming(keys, i + 1))
            batch = {k: v.to(self.device, non_blocking=True) for k, v in host.items()}
            with self.autocast():
                loss, parts = self.task.loss(self.model, batch, self.step)
            self.scaler.scale(loss if weight == 1.0 else loss * weight).backward()
            total_loss = _accumulate(total_loss, loss.detach().float(), weight)
            for key, value in parts.items():
                components[key] = _accumulate(components.get(key), value.detach().float(), weight)
        lr = self.peak_lr * self.lr_scale * lr_at(self.step, self.total_steps, 1.0, t.schedule, t.warmup_frac,
                                                  t.cooldown_frac, t.min_lr_frac)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.scaler.unscale_(self.optimizer)
        # clip_grad_norm_ returns the pre-clip norm and applies the scaling (seed 001 computed it and never did).
        max_norm = t.clip_grad_norm if t.clip_grad_norm > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        # The step's one device sync: the finiteness decision must be made before optimizer.step(), and the
        # values the step event logs come back in the same transfer (not 2 + n more `.item()` syncs later).
        names = list(components)
        host = torch.stack([total_loss, grad_norm.float(), *(components[k] for k in names)]).tolist()
        total_loss, grad_norm, components = host[0], host[1], dict(zip(names, host[2:]))
        finite = math.isfinite(total_loss) and math.isfinite(grad_norm)
        if self.scaler.is_enabled():
            self.scaler.step(self.optimizer)  # the scaler skips inf/nan steps itself and lowers the scale
            self.scaler.update()
            finite = math.isfinite(total_loss)  # inf grads are the scaler's business under fp16
        elif finite:
            self.optimizer.step()
        self.step += 1
        elapsed = max(time.perf_counter() - started, 1e-9)
        self._pending_loss = (self.step, total_loss, components, grad_norm, lr, elapsed, len(indices), not finite)
        if self.nan_guard.record(finite):
            self._on_nan_patience()
        elif not finite:
            self.bus.emit(ev.Warning(text=f"step {self.step}: non-finite loss or gradient; optimizer step skipped "
                                     f"({self.nan_guard.consecutive} in a row)", step=self.step))

    def _log_pending(self) -> None:
        """Emit the step event (its values were read in the step's one device sync)."""
        if self._pending_loss is None:
            return
        step, loss, parts, grad_norm, lr, elapsed, n, skipped = self._pending_loss
        self._pending_loss = None
        self.status_step(step)
        if step % self.config.train.log_every and step != self.total_steps and not skipped:
            return
        self.bus.emit(ev.StepLogged(
            step=step, epoch=self.epoch, loss=float(loss), lr=lr, grad_norm=float(grad_norm),
            samples_per_s=n / elapsed, steps_per_s=1.0 / elapsed, batch_size=self.batch_size,
            components={k: float(v) for k, v in parts.items()}, skipped=skipped))
        sample = self.budget.sample(step)
        if sample is not None:
            self.bus.emit(sample)

    def status_step(self, step: int) -> None:
        """Hook for the engine process's status record (replaced by engine.main)."""

    def _recover_from_oom(self) -> None:
        old_micro = math.ceil(self.batch_size / self.grad_accum)
        self.optimizer.zero_grad(set_to_none=True)
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        self.grad_accum = min(self.batch_size, self.grad_accum * 2)
        new_micro = math.ceil(self.batch_size / self.grad_accum)
        self.bus.emit(ev.SettingChanged(
            name="grad_accum", old=self.grad_accum // 2, new=self.grad_accum, step=self.step,
            reason=f"out of memory: micro-batch {old_micro} -> {new_micro}, effective batch {self.batch_size} kept"))

    def _on_nan_patience(self) -> None:
        t = self.config.train
        reason = f"{self.nan_guard.consecutive} consecutive non-finite steps"
        if t.nan_policy == "stop":
            raise _GracefulStop(f"stopped: {reason}", EXIT_POLICY, checkpoint=False, status="failed")
        if t.nan_policy == "skip":
            self.bus.emit(ev.Warning(text=f"{reason}; still skipping (nan_policy=skip)", step=self.step))
            self.nan_guard.consecutive = 0
            return
        self._log_pending()  # the failing step's event comes before the rollback's, in step order
        good = self._load_good_checkpoint()
        if good is None:
            raise _GracefulStop(f"stopped: {reason} and no good checkpoint to roll back to", EXIT_POLICY,
                                checkpoint=False, status="failed")
        point, count = self._rollback_point
        self._rollback_point = (good, count + 1 if point == good else 1)
        if self._rollback_point[1] > MAX_ROLLBACKS_TO_ONE_STEP:
            raise _GracefulStop(f"stopped: {reason} again after {MAX_ROLLBACKS_TO_ONE_STEP} rollbacks to step {good} "
                                f"(LR x{self.lr_scale:g}); the same steps keep giving non-finite values",
                                EXIT_POLICY, checkpoint=False, status="failed")
        self.lr_scale *= t.rollback_lr_factor
        self.nan_guard.consecutive = 0
        self.bus.emit(ev.SettingChanged(name="lr", old=None, new=self.peak_lr * self.lr_scale, step=self.step,
                                        reason=f"{reason}: rolled back to step {good} from its checkpoint, "
                                        f"LR x{t.rollback_lr_factor}"))

    def _load_good_checkpoint(self) -> int | None:
        if self.checkpoint_dir is None:
            return None
        try:
            loaded = ckpt.load_latest(self.checkpoint_dir)
        except ckpt.CheckpointError:
            return None
        lr_scale, nan_total = self.lr_scale, self.nan_guard.total
        self._restore(loaded)
        self.lr_scale = lr_scale
        self.nan_guard.total = nan_total  # the run's count of skipped steps survives the rollback
        return self.step

    # ------------------------------------------------------------------ controls
    def _boundary(self) -> None:
        """Apply queued controls; block here while paused. Raises _Stop / _GracefulStop to end the run."""
        self._apply(self.controls.drain())
        # Paused, every stop reason still ends the wait: abort-now, and a graceful stop (SIGTERM, first Ctrl-C,
        # SIGHUP with on_hangup=stop, a viewer's graceful abort), which checkpoints at the paused step below.
        while self.state == "paused" and not self.controls.stopping():
            self.controls.wait(0.25)
            self._apply(self.controls.drain())
        if self.controls.stop_event.is_set():
            raise _Stop(self.controls.stop_reason or "aborted now, no checkpoint")
        if self.controls.graceful_event.is_set():
            raise _GracefulStop(self.controls.graceful_reason or "aborted by request",
                                self.controls.graceful_exit_code)

    def _apply(self, requests: list[Request]) -> None:
        for request in requests:
            try:
                self._apply_one(request)
            except (TaskError, ValueError) as exc:
                self._refuse(request, str(exc))

    def _ack(self, request: Request, name: str, old: Any, new: Any, reason: str = "") -> None:
        self.bus.emit(ev.SettingChanged(name=name, old=old, new=new, reason=reason, step=self.step,
                                        request_id=request.id))

    def _refuse(self, request: Request, why: str) -> None:
        self.bus.emit(ev.Refused(request=request.to_dict(), why=why, step=self.step, request_id=request.id))

    def _apply_one(self, request: Request) -> None:
        action = request.action
        if action == "pause":
            if self.state == "paused":
                return self._refuse(request, "already paused")
            self._set_state("paused", "paused by request")
            return self._ack(request, "state", "running", "paused")
        if action == "resume":
            if self.state != "paused":
                return self._refuse(request, "not paused")
            self._set_state("running", "resumed by request")
            return self._ack(request, "state", "paused", "running")
        if action == "checkpoint_now":
            path = self._checkpoint("last", request_id=request.id, kind="manual")
            if path is None:
                return self._refuse(request, "checkpoint failed; see the checkpoint_failed event")
            return self._ack(request, "checkpoint", None, path)
        if action == "abort":
            self._ack(request, "state", self.state, "aborting", reason=f"abort ({request.mode}) by request")
            return  # the stop itself happens in _boundary via the events Controls.submit set
        if action == "free_memory":
            return self._free_memory(request)
        if action == "set":
            return self._set(request)
        self._refuse(request, f"unknown action {action!r}")

    def _free_memory(self, request: Request) -> None:
        if self.device.type != "cuda":
            return self._refuse(request, "nothing to free: training on CPU holds no cached device memory")
        before = torch.cuda.memory_reserved(self.device)
        gc.collect()
        torch.cuda.empty_cache()
        after = torch.cuda.memory_reserved(self.device)
        self._ack(request, "reserved_bytes", before, after, reason=f"freed {before - after} bytes of cached memory")

    def _set(self, request: Request) -> None:
        name, value = request.name, request.value
        if name == "lr":
            if not value > 0:
                return self._refuse(request, f"lr must be > 0, got {value}")
            old = self.peak_lr
            self.peak_lr = value
            return self._ack(request, "lr", old, value)
        if name == "batch_size":
            if value < 1:
                return self._refuse(request, f"batch_size must be >= 1, got {value}")
            why = self.budget.check_change({"batch_size": value}, request.force)
            if why:
                return self._refuse(request, why)
            old = self.batch_size
            self.batch_size = value
            self.grad_accum = min(self.grad_accum, value)
            self.config = self.config.model_copy(update={"train": self.config.train.model_copy(
                update={"batch_size": value, "grad_accum": self.grad_accum})})
            return self._ack(request, "batch_size", old, value, "data position kept: no sample replayed or skipped")
        if name in ("attn_backend", "attn_chunk"):
            if name not in self.task.supports:
                return self._refuse(request, f"task {self.task.name!r} has no {name} setting")
            if name == "attn_backend" and value not in self.task.attn_backends:
                return self._refuse(request, f"attn_backend {value!r}; allowed: {', '.join(self.task.attn_backends)}")
            if name == "attn_chunk" and value < 1:
                return self._refuse(request, f"attn_chunk must be >= 1, got {value}")
            why = self.budget.check_change({name: value}, request.force)
            if why:
                return self._refuse(request, why)
            old = getattr(self.config.model, name)
            self.task.apply_setting(self.model, name, value)
            self.config = self.config.model_copy(update={"model": self.config.model.model_copy(update={name: value})})
            return self._ack(request, name, old, value)
        self._refuse(request, f"cannot set {name!r}")

    def _set_state(self, state: str, reason: str = "") -> None:
        if state != self.state:
            self.state = state
            self.bus.emit(ev.StateChanged(state=state, reason=reason, step=self.step))

    # ------------------------------------------------------------------ evaluation
    def _evaluate(self) -> ev.EvalDone:
        started = time.perf_counter()
        self.model.eval()
        totals: dict[str, float] = {}
        count = 0
        t = self.config.train
        indices = list(range(t.overfit)) if t.overfit else self.task.val_indices()
        micro = max(1, math.ceil(self.batch_size / self.grad_accum))
        try:
            with torch.no_grad():
                for start in range(0, len(indices), micro):
                    if self.controls.stop_event.is_set() or self.controls.graceful_event.is_set():
                        raise _EvalInterrupted()
                    chunk = indices[start: start + micro]
                    batch = {k: v.to(self.device) for k, v in
                             self.task.make_batch(chunk, 0, train=bool(t.overfit)).items()}
                    with self.autocast():
                        metrics = self.task.eval_batch(self.model, batch)
                    for key, value in metrics.items():
                        totals[key] = totals.get(key, 0.0) + float(value) * len(chunk)
                    count += len(chunk)
        except _EvalInterrupted:
            self.model.train()
            self._boundary()  # raises the stop that interrupted us
            raise
        self.model.train()
        means = {k: v / max(1, count) for k, v in totals.items()}
        metric, higher = self.task.primary_metric
        self.abort_policy.higher_is_better = higher
        value = means.get(metric, means.get("val_loss"))
        is_best, abort = self.abort_policy.update(value)
        self._abort_reason = (f"val {metric} {value:.2f} sat more than {self.abort_policy.drop} below its best "
                              f"{self.abort_policy.best:.2f} on {self.abort_policy.strikes} consecutive evals"
                              if abort else "")
        self._should_abort = abort
        val_loss = means.pop("val_loss", float("nan"))
        if self.first_val_loss is None:
            self.first_val_loss = val_loss
        self.last_val_loss = val_loss
        psnr = means.pop("psnr_db", None)
        metrics = {"val_loss": val_loss, **({"psnr_db": psnr} if psnr is not None else {}), **means}
        event = ev.EvalDone(step=self.step, val_loss=val_loss, psnr_db=psnr, extra=means, metrics=metrics,
                            primary=metric, best=self.abort_policy.best, is_best=is_best,
                            seconds=time.perf_counter() - started)
        self.bus.emit(event)
        if is_best and self.config.checkpoint.save_best and self.step > 0:
            self._checkpoint("best")
        return event

    def _evaluate_and_judge(self) -> bool:
        self._evaluate()
        return self._should_abort

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint(self, which: str, request_id: str | None = None, kind: str | None = None) -> str | None:
        if self.checkpoint_dir is None:
            return None
        self._set_state_quiet("checkpointing")
        name = f"step-{self.step:08d}" if which == "step" else which
        path = self.checkpoint_dir / f"{name}.safetensors"
        tensors, meta = self._capture()
        try:
            size, seconds = ckpt.timed_write(path, tensors, meta, keep_previous=(which == "last"))
        except ckpt.CheckpointWriteError as exc:
            self._save_error = str(exc)
            self.bus.emit(ev.CheckpointFailed(step=self.step, path=str(path), error=str(exc)))
            self._restore_state_quiet()
            return None
        if which == "step":
            self._prune_step_checkpoints()
        if which == "last":
            self._saved_last_at = self.step
        self.last_checkpoint = str(path)
        self.bus.emit(ev.CheckpointSaved(step=self.step, path=str(path), kind=kind or which, seconds=seconds,
                                         bytes=size, digest=ckpt.optimizer_digest(tensors), request_id=request_id))
        self._restore_state_quiet()
        return str(path)

    def _set_state_quiet(self, state: str) -> None:
        self._state_before_ckpt = self.state
        if self.state in ("running", "paused"):
            self._set_state(state, "writing checkpoint")

    def _restore_state_quiet(self) -> None:
        previous = getattr(self, "_state_before_ckpt", self.state)
        if self.state == "checkpointing":
            self._set_state(previous, "checkpoint written")

    def _prune_step_checkpoints(self) -> None:
        keep = self.ckpt_policy.keep_last
        files = sorted(self.checkpoint_dir.glob("step-*.safetensors"))
        for old in files[:-keep] if keep else files:
            try:
                old.unlink()
            except OSError:
                pass

    def _capture(self) -> tuple[dict[str, torch.Tensor], dict]:
        tensors = {f"model.{k}": v for k, v in self.model.state_dict().items()}
        optim_tensors, optim_meta = ckpt.optimizer_tensors(self.optimizer)
        tensors.update(optim_tensors)
        rng_tensors, rng_meta = ckpt.rng_capture()
        tensors.update(rng_tensors)
        meta = {
            "step": self.step, "epoch": self.epoch, "position": self.position,
            "batch_size": self.batch_size, "grad_accum": self.grad_accum,
            "peak_lr": self.peak_lr, "lr_scale": self.lr_scale, "total_steps": self.total_steps,
            "config": self.config.model_dump(mode="json"), "optimizer": optim_meta, "rng": rng_meta,
            "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else {},
            "task_state": self.task.state_dict(), "abort": self.abort_policy.state(),
            "nan": self.nan_guard.state(), "first_val_loss": self.first_val_loss, "params": self.params,
        }
        return tensors, meta

    def _restore(self, loaded: ckpt.Loaded) -> None:
        meta, tensors = loaded.meta, loaded.tensors
        try:  # metadata whose checksum was recomputed after an edit must fail here, not as a crash mid-run
            _check_meta(meta)
        except (KeyError, TypeError, ValueError) as exc:
            raise ckpt.CheckpointError(f"{loaded.path}: checkpoint metadata is incomplete or invalid ({exc})") \
                from None
        model_state = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
        try:
            self.model.load_state_dict(model_state, strict=True)
        except RuntimeError as exc:
            first = str(exc).splitlines()[1].strip() if len(str(exc).splitlines()) > 1 else str(exc)
            raise ckpt.CheckpointError(f"{loaded.path}: checkpoint is from another model shape ({first[:160]})") \
                from None
        try:
            ckpt.restore_optimizer(self.optimizer, tensors, meta["optimizer"])
            ckpt.rng_restore(tensors, meta["rng"])
            if meta.get("scaler") and self.scaler.is_enabled():
                self.scaler.load_state_dict(meta["scaler"])
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ckpt.CheckpointError(f"{loaded.path}: optimizer or RNG state is damaged ({type(exc).__name__}: "
                                       f"{str(exc)[:120]})") from None
        self.step, self.epoch, self.position = meta["step"], meta["epoch"], meta["position"]
        self.batch_size, self.grad_accum = meta["batch_size"], meta["grad_accum"]
        self.peak_lr, self.lr_scale = meta["peak_lr"], meta["lr_scale"]
        self.abort_policy = AbortPolicy(**meta["abort"])
        self.nan_guard = NanGuard(**meta["nan"])
        self.first_val_loss = meta.get("first_val_loss")
        self._order_cache = None
        self.last_checkpoint = str(loaded.path)  # what a failed save leaves the run with

    # ------------------------------------------------------------------ start / finish
    def _emit_started(self) -> None:
        from engine import device as dev

        budget = self.budget.on_start(self)
        self.bus.emit(ev.RunStarted(
            name=self.name, task=self.config.task.name, preset=self.config.task.preset,
            config=self.config.model_dump(mode="json"), params=self.params, device=self.device.type,
            device_name=dev.describe(self.device), budget=budget, total_steps=self.total_steps,
            start_step=self.step, resumed_from=str(self.resume.path) if self.resume else None,
            pid=__import__("os").getpid()))
        if self.resume and self.resume.skipped:
            for note in self.resume.skipped:
                self.bus.emit(ev.Warning(text=f"skipped damaged checkpoint: {note}", step=self.step))

    def _overfit_exit(self) -> int:
        return EXIT_POLICY if self._overfit_failed() else EXIT_FINISHED

    def _overfit_failed(self) -> bool:
        t = self.config.train
        if not t.overfit or self.first_val_loss is None or self.last_val_loss is None:
            return False
        return not (self.last_val_loss <= t.overfit_target * self.first_val_loss)

    def _overfit_reason(self) -> str:
        t = self.config.train
        if not t.overfit:
            return ""
        ratio = (self.last_val_loss or float("nan")) / max(self.first_val_loss or float("nan"), 1e-30)
        verdict = "FAILED" if self._overfit_failed() else "passed"
        return (f"overfit gate {verdict}: val loss {self.last_val_loss:.3g} is {ratio:.3f} of the untrained "
                f"{self.first_val_loss:.3g} (must be <= {t.overfit_target})")

    def _finish(self, status: str, exit_code: int, reason: str, checkpoint: bool) -> Outcome:
        self.prefetch.close()
        self._log_pending()
        path = None
        if (checkpoint or status == "finished") and self._saved_last_at != self.step:
            path = self._checkpoint("last", kind="final")
            if path is None and self.checkpoint_dir is not None:
                # The end state is not on disk: say where the newest good one is, and do not exit 0 for it.
                kept = f"newest good checkpoint {self.last_checkpoint}" if self.last_checkpoint \
                    else "no checkpoint on disk"
                reason = f"{reason}; final checkpoint FAILED ({self._save_error}); {kept}"
                exit_code = exit_code or EXIT_POLICY
        final_state = {"finished": "finished", "aborted": "aborted", "interrupted": "aborted"}.get(status, "failed")
        self._set_state(final_state, reason)
        outcome = Outcome(status, exit_code, reason, path or self.last_checkpoint)
        resume = None
        if status != "finished" and self.run_dir is not None:
            resume = f"sensorlm-tui train --resume {self.run_dir}"
        self.bus.emit(ev.RunFinished(status=status, best=self.abort_policy.best, steps=self.step, reason=reason,
                                     checkpoint=outcome.checkpoint, resume_command=resume, exit_code=exit_code))
        return outcome


def _accumulate(total: torch.Tensor | None, value: torch.Tensor, weight: float) -> torch.Tensor:
    """``total + value * weight`` without the ops a single micro-batch does not need (×1.0 and 0 + x are exact,
    so the numbers are identical; at 1,000 steps/s each skipped op is ~0.5 % of the step)."""
    value = value if weight == 1.0 else value * weight
    return value if total is None else total + value


def _check_meta(meta: dict) -> None:
    """ValueError/KeyError/TypeError naming the first field of checkpoint metadata _restore cannot use."""
    for key, low in (("step", 0), ("epoch", 0), ("position", 0), ("batch_size", 1), ("grad_accum", 1)):
        value = meta[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{key}={value!r}: must be an integer >= {low}")
    for key in ("peak_lr", "lr_scale"):
        value = meta[key]
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not (0 < value < math.inf):
            raise ValueError(f"{key}={value!r}: must be a positive number")
    for key in ("optimizer", "rng", "abort", "nan"):
        if not isinstance(meta[key], dict):
            raise ValueError(f"{key}: must be a JSON object")
    AbortPolicy(**meta["abort"]), NanGuard(**meta["nan"])  # TypeError on unknown or missing fields


class _GracefulStop(Exception):
    """Internal: checkpoint (unless told not to) and stop with an exit code."""

    def __init__(self, reason: str, exit_code: int, checkpoint: bool = True, status: str = "aborted") -> None:
        super().__init__(reason)
        self.reason = reason
        self.exit_code = exit_code
        self.checkpoint = checkpoint
        self.status = status
