"""The loops the engine is compared with, each run in a process of its own: `python -m bench.baseline_loops KIND`.

Every loop trains the same model (the task's ``build_model`` after
``torch.manual_seed(train.seed)``, as the engine seeds it) on the same batches
(the engine's epoch order, ``task.make_batch(indices, step)``) with the same
AdamW groups, gradient clipping and LR schedule, so all reach the same loss
and differ only in how they run:

* ``dataloader``: the loop a careful user writes: a ``torch.utils.data``
  Dataset of batches, ``DataLoader(num_workers=1)`` building the next ones in a
  worker process, the step, ``float(loss)`` each step;
* ``lightning``: a ``LightningModule`` over the same model, loss and optimizer,
  ``Trainer(gradient_clip_val=…)`` on the same DataLoader (the ``bench`` extra);
* ``inline``: every batch built in the loop itself (the old headline baseline: a
  lower bound, since nothing overlaps).

The optimizer is the one a careful user writes, ``torch.optim.AdamW(groups,
lr=…, betas=…, eps=…)`` with torch's default implementation (on CPU a loop over
the tensors). ``--engine-settings`` gives a loop the two process settings the
engine makes for itself (engine.optim.fused: fused AdamW;
engine.training.allocator: freed memory kept for the next step), so the page can show
how much of the engine's lead they are. ``--compile model`` runs the loss through ``torch.compile(model)`` in
the loop and inside the LightningModule (bench.compile_bench compares them with the engine's
``--compile model``).

Prints one JSON line: each step's end (``marks``: ``time.time()`` once the
step's loss is on the host, the clock and the moment the engine stamps its
step events with), the seconds each step spent getting its batch (``data_s``:
waiting on the DataLoader, or building it inline; none for Lightning, whose
Trainer fetches it), and the last step's loss. The benchmark reads the rate
over any window of steps from the marks, and the CPU the loop's process tree
used from outside (bench.cpu_share.CpuTrace), as it does for the engine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

#: Set by ``--engine-settings``: fused AdamW and the engine's allocator settings in this loop too.
ENGINE_SETTINGS = False
#: Set by ``--compile model``: the loss runs through ``torch.compile(model)``, as a user compiles a model (the
#: optimizer keeps the model's own parameters; the engine's ``--compile model`` does the same).
COMPILE = "off"


def compiled(model):
    """``model`` as the loop's forward runs it: ``torch.compile(model)`` under ``--compile model``."""
    import torch

    return torch.compile(model) if COMPILE == "model" else model


def _setup(preset: str, steps: int, batch: int, task_name: str = "sensorlm"):
    import numpy as np
    import torch

    from engine.core import config as cfg
    from engine.core.registry import load_task_class
    from engine.optim.optimization import adamw
    from engine.optim.schedule import lr_at
    from engine.training.allocator import keep_freed_memory

    config = cfg.load(task=task_name, preset=preset, overrides={"train": {"max_steps": steps, "batch_size": batch}})
    t = config.train
    torch.manual_seed(t.seed)
    task = load_task_class(config.task.name)(config)
    task.setup(None)
    model = task.build_model()
    groups = task.param_groups(model)  # the groups the engine trains: decay on matrices, none on the rest
    if ENGINE_SETTINGS:
        keep_freed_memory()  # before the DataLoader forks its worker: the worker inherits it
        optimizer = adamw(groups, config.optimizer, config.runtime.precision)
    else:
        o = config.optimizer
        optimizer = torch.optim.AdamW(groups, lr=o.lr, betas=tuple(o.betas), eps=o.eps)
    sched = config.schedule
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_at(
        s, steps, 1.0, sched.kind, sched.warmup_frac, sched.cooldown_frac, sched.min_lr_frac))
    order = np.random.default_rng((t.seed, 0)).permutation(task.train_size())
    return config, task, model, optimizer, schedule, order


class Batches:
    """Dataset whose item ``i`` is step ``i``'s whole batch (``DataLoader(batch_size=None)``)."""

    def __init__(self, task, order, batch: int, steps: int) -> None:
        self.task, self.order, self.batch, self.steps = task, order, batch, steps

    def __len__(self) -> int:
        return self.steps

    def __getitem__(self, step: int) -> dict:
        start = (step * self.batch) % len(self.order)
        return self.task.make_batch([int(i) for i in self.order[start: start + self.batch]], step, train=True)


def _loader(task, order, batch: int, steps: int, workers: int, pin: bool = False):
    from torch.utils.data import DataLoader

    return DataLoader(Batches(task, order, batch, steps), batch_size=None, shuffle=False, num_workers=workers,
                      persistent_workers=workers > 0, prefetch_factor=2 if workers else None, pin_memory=pin)


class Marks:
    """Each finished step's wall time (``time.time()``, as the engine's step events) and, where the loop fetches
    its own batches, the seconds it spent getting each one."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.data_s: list[float] = []

    def step_done(self) -> None:
        """Mark the step that just finished."""
        self.times.append(time.time())


def window_rate(marks: list[float], lo: int, hi: int) -> float:
    """Steps/s between the ends of steps ``lo`` and ``hi`` (1-based); NaN when the run did not reach ``hi``."""
    if not 1 <= lo < hi <= len(marks) or marks[hi - 1] <= marks[lo - 1]:
        return float("nan")
    return (hi - lo) / (marks[hi - 1] - marks[lo - 1])


def dataloader_loop(preset: str, steps: int, batch: int, workers: int = 1, inline: bool = False,
                    device: str = "cpu") -> dict:
    """The careful user's loop (``inline``: batches built in the loop, no DataLoader) on ``device``:
    {marks, data_s, loss}."""
    import torch

    config, task, model, optimizer, schedule, order = _setup(preset, steps, batch)
    model.to(device)  # before the first step: AdamW's state is created on the parameters' device
    clip = config.optimizer.clip_grad_norm
    source = iter((Batches(task, order, batch, steps)[s] for s in range(steps)) if inline else
                  _loader(task, order, batch, steps, workers, pin=device != "cpu"))
    marks, loss_value = Marks(), float("nan")
    net = compiled(model)
    for step in range(steps):
        asked = time.time()
        data = next(source)  # built here (inline), or waited for (the DataLoader's workers)
        marks.data_s.append(time.time() - asked)
        data = {k: v.to(device, non_blocking=True) for k, v in data.items()}
        loss, _ = task.loss(net, data, step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        schedule.step()
        loss_value = float(loss.detach())
        marks.step_done()
    return {"marks": marks.times, "data_s": marks.data_s, "loss": loss_value}


def lightning_loop(preset: str, steps: int, batch: int, workers: int = 1, callbacks: tuple = ()) -> dict:
    """Lightning's Trainer on the same model, batches, optimizer, clipping and schedule: {marks, data_s (empty: the
    Trainer fetches), loss}; ``callbacks`` join the Trainer's (bench.integrations adds the cockpit's)."""
    import lightning as L  # noqa: N812 (its documented alias)

    config, task, model, optimizer, schedule, order = _setup(preset, steps, batch)
    marks = Marks()
    losses: list[float] = []

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = compiled(model)

        def training_step(self, data, index):
            loss, _ = task.loss(self.model, data, index)
            return loss

        def configure_optimizers(self):
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    class Clock(L.Callback):
        def on_train_batch_end(self, trainer, module, outputs, data, index) -> None:
            losses.append(float(outputs["loss"].detach()))  # what its progress bar / logger read each step
            marks.step_done()

    trainer = L.Trainer(max_steps=steps, accelerator="auto", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        limit_val_batches=0, gradient_clip_val=config.optimizer.clip_grad_norm or None,
                        callbacks=[Clock(), *callbacks])
    pin = trainer.strategy.root_device.type == "cuda"
    trainer.fit(Module(), train_dataloaders=_loader(task, order, batch, steps, workers, pin=pin))
    return {"marks": marks.times, "data_s": marks.data_s, "loss": losses[-1] if losses else float("nan")}


def main(argv: list[str] | None = None) -> int:
    """Run one loop and print its JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["dataloader", "lightning", "inline"])
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1, help="DataLoader num_workers (the careful loop: 1)")
    parser.add_argument("--device", default="auto", help="auto: cuda when available (as the engine picks)")
    parser.add_argument("--engine-settings", action="store_true",
                        help="fused AdamW and the engine's allocator settings (module docstring)")
    parser.add_argument("--compile", choices=["off", "model"], default="off", help="torch.compile the model")
    args = parser.parse_args(argv)
    global ENGINE_SETTINGS, COMPILE
    ENGINE_SETTINGS, COMPILE = args.engine_settings, args.compile
    import logging

    import torch

    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    torch.set_num_threads(args.threads)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if args.kind == "lightning":
        result = lightning_loop(args.preset, args.steps, args.batch, args.workers)
    else:
        result = dataloader_loop(args.preset, args.steps, args.batch, args.workers, inline=args.kind == "inline",
                                 device=device)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
