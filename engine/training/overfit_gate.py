"""The overfit gate as a preflight: before a run trains, a copy of its model must learn a few frozen samples.

Why: a wiring bug (conditioning that never reaches the network,
a loss on the wrong tensor, a detached output) trains "fine" for hours and
learns nothing; a copy of the model that cannot even memorise eight fixed
samples shows it in a minute. With ``evaluation.overfit_gate = N`` the engine,
before the first evaluation of a fresh run, trains a copy of the model for
``evaluation.overfit_gate_steps`` steps on training samples 0..N-1 with step-0
damage (the samples a ``evaluation.overfit`` run uses), scores them with the
task's own ``eval_batch`` before and after, and stops the run (status
"failed", exit 1, the verdict as the reason) unless their validation loss
fell to ``evaluation.overfit_target`` × the untrained one. That is the same rule,
and the same threshold, as the verdict of a whole ``evaluation.overfit`` run
(``verdict`` below serves both); a task whose untrained model is already good
(the gap-filler starts as a blend of its neighbours) sets a laxer target in
its presets.

Isolation: the copy has its own AdamW (constant LR ``optimizer.lr``, no weight
decay, the run's clipping), runs under ``torch.random.fork_rng`` and with the
task's test fault hook detached, so the run that follows is exactly the run
without the gate (a test checks the losses are identical). Cost: one copy of
the parameters and optimizer state, and ``overfit_gate_steps`` steps on N
samples in one batch. Resumed runs skip it: they passed it when they started.
"""

from __future__ import annotations

import copy
import math
from contextlib import nullcontext
from typing import Callable

import torch

from engine.core.core_sections import EvaluationConfig, OptimizerConfig
from engine.run import events as ev


def verdict(first: float | None, last: float | None, target: float) -> tuple[bool, str]:
    """(failed, the line that says so): passed when ``last <= target × first`` (the untrained val loss)."""
    failed = first is not None and last is not None and not last <= target * first
    ratio = (last if last is not None else math.nan) / max(first if first is not None else math.nan, 1e-30)
    return failed, (f"overfit gate {'FAILED' if failed else 'passed'}: val loss {last:.3g} is {ratio:.3f} of "
                    f"the untrained {first:.3g} (must be <= {target})")


class OverfitGate:
    """The preflight check of ``evaluation.overfit_gate`` (see the module docstring); owns no state worth saving."""

    def __init__(self, evaluation: EvaluationConfig, optimizer: OptimizerConfig, precision: str) -> None:
        """How many samples and steps (``evaluation``), the run's AdamW and clip (``optimizer``: the copy trains
        as the run would) and ``runtime.precision``."""
        self.evaluation, self.optimizer, self.precision = evaluation, optimizer, precision

    @property
    def enabled(self) -> bool:
        """True when the run asks for the gate (and is not itself an overfit run, which is its own gate)."""
        return self.evaluation.overfit_gate > 0 and not self.evaluation.overfit

    def check(self, task, model: torch.nn.Module, device: torch.device, emit: Callable[[ev.Event], None],
              autocast: Callable = nullcontext) -> str:
        """Run the gate; "" when it passed (or is off), else the one-line reason the run must stop."""
        if not self.enabled:
            return ""
        n, steps = min(self.evaluation.overfit_gate, task.train_size()), self.evaluation.overfit_gate_steps
        if self.precision == "fp16":  # fp16 would need the run's grad scaler; the gate checks wiring, fp32 does
            autocast = nullcontext
        emit(ev.PhaseStarted(phase="overfit gate", detail=f"{n} frozen samples, {steps} steps"))
        faults, task.faults = getattr(task, "faults", None), None  # injected faults are for the run, not its gate
        devices = [device.index or 0] if device.type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=devices):
                first, last = self._train(task, copy.deepcopy(model), device, n, autocast)
        finally:
            task.faults = faults
        failed, line = verdict(first, last, self.evaluation.overfit_target)
        if failed:
            return line
        emit(ev.LogLine(text=line, stream="engine"))
        emit(ev.PhaseStarted(phase="first evaluation, first step"))  # what the engine's start-up was at
        return ""

    def _train(self, task, model: torch.nn.Module, device: torch.device, n: int, autocast: Callable
               ) -> tuple[float, float]:
        """(val loss before, val loss after) of ``model`` trained on samples 0..n-1."""
        o = self.optimizer
        batch = {k: v.to(device) for k, v in task.make_batch(list(range(n)), 0, train=True).items()}
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=o.lr, betas=tuple(o.betas), eps=o.eps, weight_decay=0.0)
        max_norm = o.clip_grad_norm if o.clip_grad_norm > 0 else math.inf
        first = _val_loss(task, model, batch, autocast)
        model.train()
        for _ in range(self.evaluation.overfit_gate_steps):
            with autocast():
                loss, _ = task.loss(model, batch, 0)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, max_norm)
            optimizer.step()
        return first, _val_loss(task, model, batch, autocast)


def _val_loss(task, model: torch.nn.Module, batch: dict, autocast: Callable) -> float:
    """The task's validation loss on ``batch`` (a per-batch mean, or a pooled (sum, count) pair)."""
    model.eval()
    try:
        with torch.no_grad(), autocast():
            value = task.eval_batch(model, batch)["val_loss"]
    finally:
        model.train()
    if isinstance(value, (tuple, list)):
        return float(value[0]) / max(float(value[1]), 1e-30)
    return float(value)
