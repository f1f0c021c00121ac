"""Traced estimate of someone else's training step: their model, their optimizer, one real batch, fake tensors.

The task trace (engine.budget.trace) rebuilds a task from its config in a
subprocess. A LightningModule, a transformers model or a plain loop has no
config to rebuild it from: what there is is the live model, its optimizer and
a batch. So this traces in the process, on fake copies of them:

- each parameter and buffer becomes a FakeTensor of the same shape, dtype and
  device (tied weights stay tied: one fake per tensor), swapped into the real
  module only for the call (``torch.func.functional_call``), so the real
  weights, their gradients and the optimizer's state are never touched; and
  whatever else the step changes in the module (a mask or a positional table
  built on the first forward, a cache, a lazily registered buffer) is put back
  afterwards (engine.budget.untouched): no fake outlives the trace;
- the optimizer is a new instance of the same class over the fakes with the
  same param groups (learning rates, betas, fused/foreach flags), so its state
  appears on the first ``step()`` as it did for the real one;
- the batch's tensors become fakes of the real batch (real shapes: the trace
  needs no template);
- two steps (``zero_grad(set_to_none=True)``, the user's loss, ``backward``,
  ``step``) run under MemTracker (engine.budget.trace_worker.tracker_class),
  because AdamW's state appears only at the first step.

Nothing is allocated for real, so the trace costs the same for any batch.
The global RNG is saved and restored around it (a dropout on a fake tensor
must not shift the user's run). It cannot trace a step that reads a value
(``.item()``, data-dependent control flow): that raises ``StepTraceError``
and the caller reports "measured only". Imports torch.
"""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext
from typing import Any, Callable

import torch
from torch import nn

from engine.budget.untouched import untouched
from engine.core.estimate import Estimate

#: The user's step up to its loss: ``loss_of(model, batch)`` → a scalar tensor (or a dict/tuple holding one first).
LossFn = Callable[[nn.Module, Any], Any]


class StepTraceError(RuntimeError):
    """The step could not be traced on fake tensors; ``str()`` is one line saying why."""


class _Step(nn.Module):
    """The user's step as a module, so functional_call swaps the fakes into ``inner`` for exactly one call."""

    def __init__(self, inner: nn.Module, loss_of: LossFn) -> None:
        super().__init__()
        self.inner = inner
        self.loss_of = loss_of

    def forward(self, batch):
        return loss_tensor(self.loss_of(self.inner, batch))


def loss_tensor(output) -> torch.Tensor:
    """The loss in what a step returned: a tensor, a mapping's ``"loss"``, or a sequence's first item."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, dict) and isinstance(output.get("loss"), torch.Tensor):
        return output["loss"]
    loss = getattr(output, "loss", None)  # a transformers ModelOutput
    if isinstance(loss, torch.Tensor):
        return loss
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    raise StepTraceError(f"the step returned {type(output).__name__}, not a loss tensor (or a dict with 'loss')")


@contextmanager
def _rng_kept():
    cpu = torch.random.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        torch.random.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def _fakes(mode, model: nn.Module) -> tuple[dict[str, torch.Tensor], dict[int, torch.Tensor]]:
    """(functional_call state keyed ``inner.<name>``, fake parameter by id of the real one)."""
    by_id: dict[int, torch.Tensor] = {}
    state: dict[str, torch.Tensor] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) not in by_id:
            by_id[id(param)] = mode.from_tensor(param.detach()).requires_grad_(param.requires_grad)
        state[f"inner.{name}"] = by_id[id(param)]
    buffers: dict[int, torch.Tensor] = {}
    for name, buffer in model.named_buffers(remove_duplicate=False):
        if id(buffer) not in buffers:
            buffers[id(buffer)] = mode.from_tensor(buffer)
        state[f"inner.{name}"] = buffers[id(buffer)]
    return state, by_id


def _fake_optimizer(optimizer: torch.optim.Optimizer | None, by_id: dict[int, torch.Tensor]):
    """The same optimizer class and groups over the fakes (plain AdamW over every trainable one without one)."""
    if optimizer is None:
        return torch.optim.AdamW([t for t in by_id.values() if t.requires_grad])
    while isinstance(getattr(optimizer, "optimizer", None), torch.optim.Optimizer):
        optimizer = optimizer.optimizer  # a wrapper (accelerate's AcceleratedOptimizer): the torch one inside
    groups = [{**{k: v for k, v in group.items() if k != "params"},
               "params": [by_id[id(p)] for p in group["params"] if id(p) in by_id]} for group in optimizer.param_groups]
    return type(optimizer)(groups)


def trace_step(model: nn.Module, optimizer: torch.optim.Optimizer | None, loss_of: LossFn, batch: Any,
               steps: int = 2, zero_grad_after_forward: bool = False, loop_holds: bool = False) -> Estimate:
    """Peak bytes of ``steps`` optimizer steps of ``loss_of(model, batch)``, traced on fakes (module docstring).

    ``zero_grad_after_forward``: the loop clears gradients between the forward and the backward, so the
    previous step's gradients are alive through the forward (Lightning's closure does this); otherwise
    they are cleared before it, as most hand-written loops and the transformers Trainer do.
    ``loop_holds``: a loop of the user's own, which may hold what the model returns and load its next batch
    before the backward (``_LoopHolds``); Lightning and the transformers Trainer drop both before it.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._pytree import tree_map

    from engine.budget.trace_worker import CATEGORY_KEYS, tracker_class

    start = time.perf_counter()
    was_training = model.training
    try:
        with untouched(model), _rng_kept(), FakeTensorMode(allow_non_fake_inputs=True) as mode:
            state, by_id = _fakes(mode, model)
            fake_optimizer = _fake_optimizer(optimizer, by_id)
            fake_batch = tree_map(lambda v: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v, batch)
            step = _Step(model, loss_of)
            tracker = tracker_class()()
            tracker.track_external(*by_id.values(), fake_optimizer)
            inputs = [v for v in _leaves(fake_batch) if isinstance(v, torch.Tensor)]
            if inputs:
                tracker.track_external(*inputs)  # category "input"
            model.train()
            holds = _LoopHolds(model, fake_batch) if loop_holds else None
            with tracker, holds or nullcontext():
                for _ in range(steps):
                    if not zero_grad_after_forward:
                        fake_optimizer.zero_grad(set_to_none=True)
                    loss = torch.func.functional_call(step, state, (holds.batch if holds else fake_batch,))
                    if holds:
                        holds.forward_done()
                    if zero_grad_after_forward:
                        fake_optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    fake_optimizer.step()
                    del loss
            peak = tracker.get_tracker_snapshot("peak")
    except StepTraceError:
        raise
    except Exception as exc:  # a step that reads values, a custom op without a fake kernel, …: one line
        text = str(exc).strip().splitlines()
        raise StepTraceError(f"{type(exc).__name__}: {text[0][:200] if text else ''}") from None
    finally:
        model.train(was_training)
    snap = next(iter(peak.values()), {})
    breakdown: dict[str, int] = {}
    total = 0
    for key, value in snap.items():
        name = getattr(key, "value", str(key))
        if name == "Total":
            total = int(value)
        elif value:
            label = CATEGORY_KEYS.get(name, name)
            breakdown[label] = breakdown.get(label, 0) + int(value)
    return Estimate(total=total, breakdown=breakdown, upper_bound=False, source="trace",
                    seconds=time.perf_counter() - start)


class _LoopHolds:
    """What a loop of the user's own keeps beside the step, on top of what autograd keeps: the model's outputs
    (``logits, loss = model(X, Y)`` holds the logits until the next forward returns, through the backward, the
    optimizer step and the next forward) and the next batch, loaded before the backward (nanoGPT's ``train.py``
    does both: its step was counted 1.4 % over a trace that kept neither, headroom included).

    The outputs are caught by a global forward hook (the user's model gets none) for the model's own calls.
    """

    def __init__(self, model: nn.Module, batch) -> None:
        self.model, self.batch = model, batch
        self.outputs: list = []
        self._handle = None

    def __enter__(self) -> "_LoopHolds":
        def keep(module, args, output):
            if module is self.model:
                self.outputs.append(output)

        self._handle = torch.nn.modules.module.register_module_forward_hook(keep)
        return self

    def __exit__(self, *exc) -> None:
        self._handle.remove()
        self.outputs.clear()

    def forward_done(self) -> None:
        """The forward returned: the loop's name now holds its outputs (the previous ones go), and it loads the
        next batch (new tensors shaped as this one; this one stays as long as the graph keeps it)."""
        del self.outputs[:-1]
        from torch.utils._pytree import tree_map

        self.batch = tree_map(lambda v: torch.empty_like(v) if isinstance(v, torch.Tensor) else v, self.batch)


def _leaves(tree) -> list:
    from torch.utils._pytree import tree_leaves

    return tree_leaves(tree)
