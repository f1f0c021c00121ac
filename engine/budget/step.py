"""The training step whose memory every predictor measures: the same code runs fake, real and profiled.

It mirrors ``engine.training.loop.Trainer._forward_backward`` line for line in what
allocates: AdamW over two parameter groups (decay / no decay), ``zero_grad``
with ``set_to_none`` first, the step's indices split with ``np.array_split``
into ``grad_accum`` micro-batches, each micro-batch made just before its
forward (so one micro-batch is on the device at a time), autocast for
bf16/fp16, ``scaler.scale(loss * weight).backward()`` (the scaler disabled
unless fp16), running loss sums, ``unscale_``, ``clip_grad_norm_`` (with
``inf`` when clipping is off), then ``optimizer.step()``. When the loop's
step changes, change this too (it is a copy because the Trainer's step is a
method over its whole state, not a function a tracer can call).

Two steps are run because AdamW creates its state lazily on the first
``step()``: one step undercounts by the whole optimizer state
(research/memory.md).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Callable

import numpy as np
import torch
from torch import nn

from engine.core.config import RunConfig

#: batch_for(step, indices) -> the micro-batch for those sample indices, already on the device.
BatchFn = Callable[[int, list], dict]


def make_optimizer(model: nn.Module, config: RunConfig) -> torch.optim.Optimizer:
    """AdamW as the Trainer builds it (``engine.optim.optimization.adamw``: fused where it can be, so the traced step
    allocates what the real one does): weight decay on ≥2-D parameters only."""
    from engine.optim.optimization import adamw

    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    return adamw([{"params": decay, "weight_decay": config.optimizer.weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}], config.optimizer, config.runtime.precision)


def autocast_for(config: RunConfig, device_type: str):
    """The autocast context of a micro-batch's forward (nullcontext in fp32)."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(config.runtime.precision)
    return torch.autocast(device_type, dtype=dtype) if dtype else nullcontext()


class FakeSafeScaler(torch.amp.GradScaler):
    """GradScaler whose ``step`` skips the found-inf check (a ``.item()``, which fake tensors cannot answer).

    Memory is the same: the check reads one scalar per device; unscaling
    already happened in place in ``unscale_``.
    """

    def step(self, optimizer, *args, **kwargs):  # noqa: D102 - GradScaler's signature
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "stage" not in self._per_optimizer_states[id(optimizer)] or \
                self._per_optimizer_states[id(optimizer)]["stage"].name != "UNSCALED":
            self.unscale_(optimizer)
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None):  # noqa: D102 - nothing to update without the inf check
        from collections import defaultdict

        self._per_optimizer_states = defaultdict(torch.amp.grad_scaler._refresh_per_optimizer_state)


def run_steps(task, model: nn.Module, optimizer: torch.optim.Optimizer, config: RunConfig, device_type: str,
              batch_for: BatchFn, steps: int = 2, fake: bool = False, sync=None) -> None:
    """Run ``steps`` optimizer steps of ``config.train.batch_size`` samples, exactly as the Trainer does.

    ``fake``: tensors are FakeTensors, so the fp16 scaler must not read values (FakeSafeScaler).
    ``sync(final)``: the context of one micro-batch's forward and backward, as the parallel strategy's
    ``sync`` (FSDP2 keeps unsharded gradients across the non-final micro-batches); None: no context.
    """
    t = config.train
    scaler_cls = FakeSafeScaler if fake else torch.amp.GradScaler
    scaler = scaler_cls(device_type, enabled=config.runtime.precision == "fp16")
    model.train()
    batch_size = t.batch_size
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        indices = np.arange(step * batch_size, (step + 1) * batch_size)
        total_loss = torch.zeros((), device=device_type)
        components: dict = {}
        chunks = [c for c in np.array_split(indices, t.grad_accum) if len(c)]
        for i, chunk in enumerate(chunks):
            weight = len(chunk) / len(indices)
            batch = batch_for(step, chunk.tolist())
            with sync(i == len(chunks) - 1) if sync is not None else nullcontext():
                with autocast_for(config, device_type):
                    loss, parts = task.loss(model, batch, step)
                scaler.scale(loss * weight).backward()
            total_loss += loss.detach().float() * weight
            for key, value in parts.items():
                components[key] = components.get(key, 0) + value.detach().float() * weight
        scaler.unscale_(optimizer)
        max_norm = config.optimizer.clip_grad_norm if config.optimizer.clip_grad_norm > 0 else float("inf")
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if scaler.is_enabled():
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        del batch, loss, parts


def batch_template(task) -> dict:
    """What one sample of each batch entry looks like: key → (tail shape, dtype, dim order) for batch-first tensors.

    Built from a real two-sample batch (cheap, whatever the batch size), so
    predictors can make batches of any size without generating data. The dim
    order (dims from the largest stride to the smallest) is kept because the
    model's memory depends on it: a channel-major batch (one built-in task's synthetic one)
    per sample, so its patchify copies x where a row-major x would be a view
    (a trace on row-major stand-ins once read 18 % low on ``demo``). Entries
    whose first dim is not the batch (or that are not tensors) are kept as they are.
    """
    sample = task.make_batch([0, 1], 0, True)
    out = {}
    for key, value in sample.items():
        if torch.is_tensor(value) and value.dim() and value.shape[0] == 2:
            order = tuple(sorted(range(value.dim()), key=lambda d: (-value.stride(d), d)))
            out[key] = (tuple(value.shape[1:]), value.dtype, order)
        else:
            out[key] = value
    return out


def is_spec(spec) -> bool:
    """Whether a ``batch_template`` entry describes a batch-first tensor (tail shape, dtype, dim order)."""
    return isinstance(spec, tuple) and len(spec) == 3 and isinstance(spec[1], torch.dtype)


def empty_batch(template: dict, batch_size: int, device) -> dict:
    """A batch of ``batch_size`` samples laid out like ``template`` (zeros; under FakeTensorMode, no memory)."""
    out = {}
    for key, spec in template.items():
        if is_spec(spec):
            tail, dtype, order = spec
            shape = (batch_size, *tail)
            stored = torch.zeros([shape[d] for d in order], dtype=dtype, device=device)
            out[key] = stored.permute([order.index(d) for d in range(len(shape))])
        else:
            out[key] = spec
    return out
