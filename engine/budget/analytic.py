"""Analytic estimate: the peak memory of a training step by pure arithmetic — torch-free, well under 1 ms.

``estimate(config, ...)`` asks the task's own analytic model (``spec.analytic_memory``,
a ``"module:function"`` returning an engine.tasks.ledger.TaskLedger) for the
micro-batch's ledger, adds the static terms and returns an Estimate whose
total is an upper bound by design
(every term bounds a live set autograd really has). Accuracy on CPU fp32,
checked against the traced step in tests/engine/budget: never below, at
most +10 %.

Static terms (bytes):

- weights: 4 · parameters (fp32 master weights in every precision);
- optimizer: AdamW's exp_avg and exp_avg_sq (2 · 4 · parameters) and one
  fp32 ``step`` scalar per parameter tensor, present from the first
  ``step()`` on — the second step's peak is the step's peak; only for the
  parameters that train (``TaskLedger.trainable_tensors``: a LoRA model's
  frozen base has none);
- input: one micro-batch on the device (the loop makes each micro-batch just
  before its forward);
- batches built ahead (CPU only): the micro-batches the data path builds
  while the step trains, host memory the step shares on a CPU run
  (engine.budget.ahead);
- scalars: the loop's running loss sums, loss components and grad-norm
  scalars (bounded by 64 of them);
- autocast weight copies: under bf16/fp16 every matmul weight is cast once
  per forward and kept (saved for backward), lp · those parameters.

Optimizer transient: none with fused AdamW (engine.optim.fused: one kernel,
no parameter-sized temporaries), which every run uses but FSDP2 and fp16 ones.
Otherwise the single-tensor AdamW torch uses on CPU computes
``denom = (exp_avg_sq.sqrt() / bias_correction).add_(eps)``, two
parameter-sized temporaries of the largest tensor at once; the foreach AdamW
it uses on CUDA takes the sqrt of every exp_avg_sq of a parameter group at
once (one group-sized temporary; bounded by all parameters).

On CUDA the caching allocator rounds every block up to 512 bytes; the bound
adds 512 bytes per parameter-sized tensor (weights, grads, two states) and
per saved activation tensor (at most 40 per block), and 64 MiB for the
cuBLAS/cuDNN workspaces PyTorch allocates through the same allocator (they
show in ``max_memory_allocated``; no tensor trace sees them). The CUDA
numerics (autocast dtypes, fp32 softmax under autocast) follow PyTorch's
documented autocast op lists and are not yet checked on a GPU here; the
``gpu`` tests compare them with ``max_memory_allocated`` where one exists.

Gradient accumulation: a micro-batch after the first runs with every
gradient allocated; the estimate is the larger of the first micro-batch
(largest, no gradients yet) and a later one.

Attention kernels: a task's model may take a ``target`` keyword
(engine.tasks.attention_kernels.Target: device, CUDA capability, torch
version) to price the attention kernel torch would run there; ``estimate`` passes
the caller's (the start guard's measured device, the planner's NVML facts) or
one for ``device`` with this machine's torch and the capability unknown.

Per rank (``layout``, engine.budget.layout): the ledger is built for the
rank's share of the batch. DDP adds its gradient buckets (one fp32 copy of
the trainable parameters). FSDP2 divides weights, AdamW state and the
optimizer transient by the shard count (each tensor's shard rounded up; FSDP2
pads a shard to whole rows, a difference below one row per tensor) and hands
the ledger a ``Sharding`` for the rest: the root's parameters, gathered
blocks and when gradients are sharded (engine.tasks.ledger).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable

from engine.budget import ahead
from engine.budget import settings as knobs
from engine.budget.layout import SINGLE, Layout
from engine.core.config import RunConfig
from engine.core.estimate import Estimate
from engine.optim.fused import fused_adamw
from engine.tasks import ledger
from engine.tasks.attention_kernels import Target

F32 = 4
CUDA_BLOCK = 512
#: cuBLAS / cuDNN workspaces PyTorch allocates through its caching allocator on CUDA (a bound: 8.5 MiB
#: per handle by default, 32 MiB on Hopper; a few handles).
CUDA_WORKSPACE = 64 << 20
#: Scalar tensors alive beside the step (running loss sums, loss components, clip norms): a bound.
SCALARS = 64


class NoAnalyticModel(LookupError):
    """The task has no closed form here; use engine.budget.trace instead."""


def model_of(config: RunConfig) -> Callable[..., ledger.TaskLedger] | None:
    """The task's analytic memory model (``spec.analytic_memory``), or None when it has none."""
    from engine.core.registry import get_spec

    target = get_spec(config.task.name).analytic_memory
    if not target:
        return None
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def micro_batches(batch_size: int, grad_accum: int) -> tuple[int, int | None]:
    """Sizes of the first and of the largest later micro-batch, as ``np.array_split`` cuts them."""
    parts = min(grad_accum, batch_size)
    first = -(-batch_size // parts)
    if parts == 1:
        return first, None
    later = first if batch_size % parts > 1 else batch_size // parts
    return first, later


def _device_of(config: RunConfig, device: str | None) -> str:
    """cpu or cuda; ``auto`` counts as cuda (its foreach optimizer transient is the larger one)."""
    device = device or config.runtime.device
    return "cpu" if device == "cpu" else "cuda"


def estimate(config: RunConfig, batch_size: int | None = None, precision: str | None = None,
             device: str | None = None, grad_accum: int | None = None, layout: Layout | None = None,
             target: Target | None = None, **task_settings: Any) -> Estimate:
    """Upper bound on the peak bytes of a training step of ``config`` with the given settings overridden.

    ``task_settings`` are the task's declared settings by name (e.g. a backend or a chunk size);
    ``layout``: the peak of one rank of that job (``batch_size`` stays the job's); ``target``: the device
    attention kernels are chosen for (module docstring).
    """
    best, settings = detail(config, batch_size, precision, device, grad_accum, layout=layout, target=target,
                            **task_settings)
    return Estimate(total=best.total, breakdown=dict(best.parts), upper_bound=True, source="analytic",
                    settings=settings)


def _takes_target(model: Callable) -> bool:
    """Whether a task's analytic model accepts the ``target`` keyword (older and plug-in models need not)."""
    try:
        return "target" in inspect.signature(model).parameters
    except (TypeError, ValueError):
        return False


def detail(config: RunConfig, batch_size: int | None = None, precision: str | None = None,
           device: str | None = None, grad_accum: int | None = None, layout: Layout | None = None,
           target: Target | None = None, **task_settings: Any) -> tuple[ledger.Peak, dict]:
    """The ledger's peak (with every candidate moment) and the resolved settings; see ``estimate``."""
    model = model_of(config)
    if model is None:
        raise NoAnalyticModel(f"task {config.task.name!r} has no analytic memory model (its spec names none)")
    config = knobs.with_settings(config, **task_settings)
    t = config.train
    B = batch_size if batch_size is not None else t.batch_size
    prec = precision or config.runtime.precision
    accum = grad_accum if grad_accum is not None else t.grad_accum
    dev = _device_of(config, device)
    if B < 1:
        raise ValueError(f"batch_size={B}: must be >= 1")

    layout = layout or SINGLE
    first, later = micro_batches(layout.rank_batch(B), accum)
    best: ledger.Peak | None = None
    built_ahead = 0
    for micro, pre in ((first, False), (later, True)):
        if micro is None:
            continue
        tl = model(config, micro, prec, dev, target=target or Target.local(dev)) if _takes_target(model) \
            else model(config, micro, prec, dev)
        if not pre:  # the batches ahead are any of the step's micro-batches: the first is the largest
            built_ahead = ahead.ahead_bytes(config, dev, tl.input_bytes)[1]
        tensors = tl.param_tensors
        trained = tensors if tl.trainable_tensors is None else tl.trainable_tensors
        W = layout.world if layout.sharded else 1
        # FSDP2: each tensor's shard (rounded up); the per-tensor `step` scalars are not sharded
        params = F32 * sum(-(-n // W) for n in tensors)
        trainable = F32 * sum(-(-n // W) for n in trained)
        static = {"weights": params, "optimizer": 2 * trainable + F32 * len(trained), "input": tl.input_bytes,
                  "scalars": SCALARS * (CUDA_BLOCK if dev == "cuda" else F32)}
        if built_ahead:
            static["batches built ahead"] = built_ahead
        if layout.strategy == "ddp":
            static["DDP gradient buckets"] = trainable
        if tl.cast_elements:
            static["autocast weight copies"] = (2 if prec != "fp32" else F32) * tl.cast_elements
        if dev == "cuda":
            static["allocator rounding"] = CUDA_BLOCK * (4 * len(tensors) + tl.activation_tensors)
            static["cuBLAS/cuDNN workspaces"] = CUDA_WORKSPACE
        if fused_adamw(prec, layout.sharded):
            opt_extra = 0  # one kernel over every tensor, in place
        elif dev == "cuda":
            opt_extra = trainable  # foreach: sqrt of a whole group's exp_avg_sq at once
        else:
            opt_extra = 2 * F32 * -(-max(trained or [0]) // W)
        sharding = None
        if layout.sharded:
            inside = tl.unit_elements if tl.unit_elements is not None else \
                sum(sum(st.units) for st in tl.stages)
            sharding = ledger.Sharding(W, root=F32 * (sum(tensors) - inside), sync=pre or later is None)
        result = ledger.peak(tl.stages, static, tl.pending, opt_extra, pre_grads=pre, sharding=sharding)
        if best is None or result.total > best.total:
            best = result
    assert best is not None
    settings = {"batch_size": B, "grad_accum": accum, "micro_batch": first, "precision": prec,
                **knobs.task_values(config), "device": dev, "phase": best.phase, **layout.settings()}
    if dev == "cpu":
        settings["batches_ahead"] = ahead.of(config)
    return best, settings


def has_model(config: RunConfig) -> bool:
    """Whether the task of ``config`` declares an analytic memory model."""
    return model_of(config) is not None
