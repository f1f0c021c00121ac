"""The cockpit in a Lightning run: one callback, ``Trainer(callbacks=[CockpitCallback("runs/mine")])``.

What comes from the trainer: the step (``global_step``, once per optimizer
step, so gradient accumulation counts as Lightning counts), the loss the
training step returned, everything it logged (``self.log``: the step's
components; what validation logs: the evals), the learning rate of the first
optimizer, the epoch, and every file a ``ModelCheckpoint`` writes (named in
the events as it appears: Lightning runs checkpoint callbacks after every
other callback, so they are seen at the next batch and at the end).

What the controls do, at the end of a training batch (every rank, agreed
through ``trainer.strategy.broadcast``):

- pause blocks in the callback, every rank at the same step;
- checkpoint now is ``trainer.save_checkpoint`` (Lightning's own file, on
  every rank as it requires), ``manual-step=N.ckpt`` beside ModelCheckpoint's
  files or in the run directory's ``checkpoints/``;
- a graceful abort saves ``aborted-step=N.ckpt`` the same way and sets
  ``trainer.should_stop``: ``fit`` returns (after the validation Lightning
  runs on an early stop) and the script goes on to exit 0;
- abort now sets ``trainer.should_stop`` without a save;
- settings are refused: the Trainer owns them.

Memory: measured every run; predicted when the module's ``training_step``
traces on fake tensors with the first real batch (automatic optimization
only), done once on rank 0 before the first step.

Lightning is imported when this module is (``lightning.pytorch``, else the
older ``pytorch_lightning``): a user of this callback has imported it already.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable

from engine.app.integrations.core import Cockpit, Decision
from engine.app.integrations.memory import StepMemory
from engine.app.integrations.numbers import as_float
from engine.app.integrations.ranks import Group, torch_group
from engine.core.taskspec import Metric

try:
    import lightning.pytorch as pl
    from lightning.pytorch.utilities.exceptions import SIGTERMException
except ImportError:  # the package's older name; a Trainer takes callbacks of its own package only
    import pytorch_lightning as pl
    from pytorch_lightning.utilities.exceptions import SIGTERMException


class CockpitCallback(pl.Callback):
    """Writes ``run_dir`` (default runs/<timestamp>) as the engine would and obeys its controls (module docstring).

    ``log_every``: a step event every this many steps (each reads the loss: a device sync on a GPU); None:
    every step, at most one each ``core.STEP_EVENT_S`` (a fast run logs every few).
    ``predict_memory``: trace the training step for a predicted peak (seconds, once).
    ``config``: extra sections for config.toml (e.g. your hyperparameters).
    """

    def __init__(self, run_dir: str | Path | None = None, *, log_every: int | None = None,
                 predict_memory: bool = True, config: dict | None = None) -> None:
        super().__init__()
        self.run_dir = run_dir
        self.log_every = max(1, int(log_every)) if log_every else None
        self.predict_memory = predict_memory
        self.config = config
        self.cockpit: Cockpit | None = None
        self.memory: StepMemory | None = None
        self._val_keys: set[str] = set()
        self._before_val: dict[str, float] = {}
        self._seen: dict[str, int] = {}  # checkpoint path → its mtime (ns) when last named in the events
        self._val_started = 0.0
        self._stopped: tuple[str, str] | None = None  # (status, reason) once a control stopped the fit
        self._last_step = -1
        self._at = -1  # trainer.global_step as the last batch end read it (on_train_start: the fit's first)
        self._begin_at: float = 0  # the next step whose batch start has work (_batch_start), before it none
        self._save_manual: Callable[[list[str]], bool] | None = None  # checkpoint-now's save (on_train_start)
        self._checkpointers: list | None = None
        self._scan_due = True  # a checkpoint may have been written since the last look (on_save_checkpoint)
        self._saving_since: list[float] = []  # time.time() of each on_save_checkpoint since the last look

    # ------------------------------------------------------------------ start
    def setup(self, trainer, pl_module, stage: str) -> None:
        """Every rank: the run directory rank 0 chose; rank 0 opens it."""
        if stage != "fit" or self.cockpit is not None:
            return
        strategy = trainer.strategy
        group = Group(trainer.global_rank, trainer.world_size, lambda obj: strategy.broadcast(obj, src=0),
                      torch_group().gather)  # Lightning has no object gather; its DDP runs on torch.distributed
        cockpit = Cockpit(self.run_dir, "lightning", group=group, primary=_primary(trainer), label="Lightning")
        self.cockpit = cockpit.open({"train": _trainer_config(trainer), **(self.config or {})})

    def on_train_start(self, trainer, pl_module) -> None:
        """The step meter (rank 0 measures; the others only agree on controls)."""
        self._at, self._begin_at = trainer.global_step, 0  # the step a resume restored; the first batch has work
        self._save_manual = lambda ids: self._save(trainer, ids, "manual")  # made once, not at every boundary
        if self.cockpit is not None and self.cockpit.owner:
            self._checkpointers = list(trainer.checkpoint_callbacks)  # looked at every batch: found once
            self.memory = StepMemory(pl_module, lambda: trainer.optimizers[0] if trainer.optimizers else None,
                                     pl_module.device)

    def _announce(self, trainer, pl_module, batch) -> None:
        """RunStarted, once, at the first batch: the trace needs one real batch."""
        from engine.optim.device import describe

        memory = self.memory
        if self.predict_memory and pl_module.automatic_optimization:
            # Lightning's closure clears gradients after the training step: the last step's are alive through it
            memory.predict(lambda module, data: _training_step(trainer, module, data), batch,
                           zero_grad_after_forward=True)
        elif not pl_module.automatic_optimization:
            memory.why = "manual optimization: the step is the module's own"
        total = trainer.estimated_stepping_batches
        self.cockpit.started(
            total_steps=int(total) if total != float("inf") else 0, start_step=trainer.global_step,
            preset=type(pl_module).__name__, params=sum(p.numel() for p in pl_module.parameters()),
            device=pl_module.device.type,
            device_name=describe(pl_module.device), budget=memory.summary(),
            resumed_from=str(Path(trainer.ckpt_path).absolute()) if trainer.ckpt_path else None,
            config=self.cockpit.describe({"train": _trainer_config(trainer), **(self.config or {})}))

    # ------------------------------------------------------------------ steps
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        """Most batches start with nothing to do, and cost two attribute reads: the step comes from the last batch
        end (``trainer.global_step`` is a chain of properties, a microsecond, and it only moves inside a batch);
        the work (RunStarted, naming a checkpoint written since, counting a step's storages) is in _batch_start."""
        if self._at + 1 < self._begin_at and not self._scan_due:
            return
        self._batch_start(trainer, pl_module, batch)

    def _batch_start(self, trainer, pl_module, batch) -> None:
        if self.cockpit is None or not self.cockpit.owner:
            self._begin_at, self._scan_due = math.inf, False  # only rank 0 measures and names checkpoints
            return
        if self.cockpit.state == "starting":
            self._announce(trainer, pl_module, batch)
        if self._scan_due:
            self._checkpoints_written(trainer)
        step = trainer.global_step + 1
        self.memory.begin(step)
        self._begin_at = self.memory.next_count(step + 1)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        cockpit, step = self.cockpit, trainer.global_step
        self._at = step
        if cockpit is None or step == self._last_step:  # a micro-batch of an accumulating step
            return
        self._last_step = step
        if cockpit.owner:
            self._log_step(trainer, outputs, batch, step)
        decision = cockpit.boundary(step, self._save_manual)
        if decision.stop:
            self._obey(trainer, decision)

    def _log_step(self, trainer, outputs, batch, step: int) -> None:
        sample = self.memory.end(step)
        if sample is not None:
            self.cockpit.emit(sample)
        if not self.cockpit.due(step, self.log_every):
            return
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        components = {k: v for k, v in _scalars(trainer.callback_metrics).items()
                      if k not in self._val_keys and k != "loss"}
        optimizers = trainer.optimizers
        self.cockpit.logged(step, loss, components, epoch=trainer.current_epoch,
                            lr=optimizers[0].param_groups[0]["lr"] if optimizers else 0.0,
                            batch_size=_batch_size(batch))

    def _obey(self, trainer, decision: Decision) -> None:
        if decision.stop == "graceful":
            self._save(trainer, [], "aborted")
            self._stopped = ("aborted", self.cockpit.controls.graceful_reason or "aborted by request")
        elif decision.stop == "now":
            self._stopped = ("aborted", self.cockpit.controls.stop_reason or "aborted now, no checkpoint")
        trainer.should_stop = True

    def _save(self, trainer, request_ids: list[str], kind: str) -> bool:
        """Lightning's own checkpoint file, on every rank (save_checkpoint is a collective under DDP); False when
        it failed (said in the events, and to the requests it answers)."""
        cockpit, step = self.cockpit, trainer.global_step
        callback = trainer.checkpoint_callback
        folder = Path(callback.dirpath) if callback is not None and callback.dirpath else cockpit.run_dir.checkpoints
        path = (folder / f"{kind}-step={step}.ckpt").absolute()
        started = time.perf_counter()
        try:
            trainer.save_checkpoint(path)
        except Exception as exc:  # a full disk must not end the run; the request gets the reason
            cockpit.save_failed(step, f"{type(exc).__name__}: {exc}", request_ids)
            return False
        if cockpit.owner:
            self._seen[str(path)] = _mtime(path)
            cockpit.saved(step, str(path), "manual" if kind == "manual" else "final", request_ids,
                          seconds=time.perf_counter() - started)
        return True

    # ------------------------------------------------------------------ validation and checkpoints
    def on_validation_start(self, trainer, pl_module) -> None:
        self._before_val = _scalars(trainer.callback_metrics)
        self._val_started = time.perf_counter()

    def on_validation_end(self, trainer, pl_module) -> None:
        """An eval: every number validation logged (learned as what changed during it, or named val*)."""
        if self.cockpit is None or not self.cockpit.owner:
            return
        after = _scalars(trainer.callback_metrics)
        self._val_keys |= {k for k, v in after.items() if self._before_val.get(k) != v or k.startswith("val")}
        if trainer.sanity_checking:
            return
        metrics = {k: v for k, v in after.items() if k in self._val_keys}
        if metrics and self.cockpit.state != "starting":
            self.cockpit.evaluated(trainer.global_step, metrics, time.perf_counter() - self._val_started)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        """A checkpoint is about to be written (any of them: ModelCheckpoint's, ours): name it at the next look,
        with how long its write took (from now to the file's last write)."""
        self._scan_due = True
        self._saving_since.append(time.time())

    def _checkpoints_written(self, trainer) -> None:
        """CheckpointSaved for each file a ModelCheckpoint wrote (or rewrote: ``last.ckpt``) since the last look."""
        self._scan_due = False
        for callback in self._checkpointers if self._checkpointers is not None else trainer.checkpoint_callbacks:
            best, last = getattr(callback, "best_model_path", ""), getattr(callback, "last_model_path", "")
            # best_k_models holds the files of a monitored metric; without one, each save is the new best_model_path
            for path in dict.fromkeys([*getattr(callback, "best_k_models", {}), best, last]):
                written = _mtime(Path(path)) if path else 0
                if written and self._seen.get(path) != written:
                    self._seen[path] = written
                    kind = "best" if path == best else "last" if path == last else "step"
                    begun = [t for t in self._saving_since if t <= written / 1e9]
                    self.cockpit.saved(trainer.global_step, str(Path(path).absolute()), kind,
                                       seconds=written / 1e9 - begun[-1] if begun else 0.0)
        self._saving_since.clear()

    # ------------------------------------------------------------------ the end
    def on_fit_end(self, trainer, pl_module) -> None:
        if self.cockpit is None:
            return
        if self.cockpit.owner:
            self._checkpoints_written(trainer)
        status, reason = self._stopped or ("finished", "")
        self.cockpit.finish(status, reason, 0)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        """The fit ends with an exception. Lightning's SIGTERM (``SIGTERMException``, raised on every rank at
        the same batch) ends it as the engine's SIGTERM does: checkpointed and stopped, resumable; Ctrl-C is
        interrupted; anything else failed."""
        if self.cockpit is None:
            return
        if self.memory is not None:
            self.memory.abandon()
        if isinstance(exception, SIGTERMException):
            saved = self._save(trainer, [], "interrupted")
            code = exception.code if isinstance(exception.code, int) else 0  # what the script will exit with
            self.cockpit.finish("aborted", "SIGTERM: checkpointed and stopped" if saved else
                                "SIGTERM: stopped; its checkpoint failed (the run's log says why)", code)
            return
        interrupted = isinstance(exception, KeyboardInterrupt)
        self.cockpit.finish("interrupted" if interrupted else "failed", f"{type(exception).__name__}: {exception}",
                            130 if interrupted else 1)


def _training_step(trainer, module, batch) -> Any:
    """The module's training_step as its Trainer runs it (the precision's autocast), without its Trainer: a
    ``self.log`` on fake values must not reach the real logged metrics (detached, Lightning skips it)."""
    import warnings

    attached = module.trainer
    module.trainer = None
    try:
        with warnings.catch_warnings(), trainer.precision_plugin.train_step_context():
            warnings.simplefilter("ignore")
            return module.training_step(batch, 0)
    finally:
        module.trainer = attached


def _primary(trainer) -> Metric | None:
    """The metric ModelCheckpoint monitors (its mode gives the direction), else val_loss."""
    callback = trainer.checkpoint_callback
    monitor = getattr(callback, "monitor", None)
    if not monitor:
        return None
    return Metric(monitor, monitor.replace("_", " "), higher_is_better=getattr(callback, "mode", "min") == "max")


def _trainer_config(trainer) -> dict:
    """The Trainer's settings worth a line in config.toml."""
    return {"max_steps": trainer.max_steps, "max_epochs": trainer.max_epochs,
            "accumulate_grad_batches": trainer.accumulate_grad_batches, "precision": str(trainer.precision),
            "world_size": trainer.world_size, "strategy": type(trainer.strategy).__name__}


def _scalars(metrics: dict) -> dict[str, float]:
    """The one-number entries of Lightning's metrics (each read of a GPU tensor is a sync); Lightning's ``self.log``
    takes only scalars, so anything else here is not the user's and is passed over without a word."""
    out = {}
    for name, value in metrics.items():
        number, _ = as_float(value)
        if number is not None:
            out[name] = number
    return out


def _mtime(path: Path) -> int:
    """When a file was last written (ns), 0 when it is not there."""
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


def _batch_size(batch) -> int:
    """Samples in a batch: the first dimension of its first tensor, looked for in the usual shapes (a tensor,
    a tuple or list, a dict: each step, so no tree walk); 0 when there is none."""
    for _ in range(4):
        shape = getattr(batch, "shape", None)
        if shape is not None:
            return int(shape[0]) if len(shape) else 0
        if isinstance(batch, dict):
            batch = next(iter(batch.values()), None)
        elif isinstance(batch, (list, tuple)):
            batch = batch[0] if batch else None
        else:
            return 0
    return 0
