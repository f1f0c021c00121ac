"""A training step as a ledger of stages, and the peak it implies: the analytic model's engine. Torch-free.

A model is described as stages in forward order. Each stage saves bytes for
backward (freed when its backward has run), owns parameters (whose gradients
appear during its backward), and has transients: bytes alive for a moment of
its forward (``fwd_extra``) or its backward (``bwd_extra``) on top of
everything else alive then, plus the gradient of its output it receives
(``grad_in``). Gradients that wait across several stages (a head's gradient
held until the stage that consumes it runs) are ``Pending``.

Autograd runs the backward in reverse creation order, so stage k's backward
sees: the saved bytes of every stage not yet processed (k and earlier), the
gradients of every stage already processed (later ones) and its own, the
pending gradients produced before it and consumed at or after it, its
incoming gradient and its transient. The step's peak is the largest of

    forward, stage k:   static + pre + Σ_{j≤k} saved_j + fwd_extra_k
    backward, stage k:  static + Σ_{j≤k} saved_j + grads(k) + pending(k) + grad_in_k + bwd_extra_k
    optimizer step:     static + all grads + optimizer transient

where ``static`` is weights + optimizer state + the micro-batch, and with
gradient accumulation a later micro-batch runs with every gradient already
allocated (``pre``), each stage adding only a transient copy of its own
before the in-place accumulate.

This is an upper bound by construction when every term is (each stage's
bounds are derived in the module that builds it), and it is tight when the
terms are the live sets autograd really has.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Stage:
    """One stage of the forward, with what it keeps and what it briefly needs (bytes)."""

    name: str
    #: Bytes kept for backward until this stage's backward has run, by breakdown group.
    saved: dict[str, int] = field(default_factory=dict)
    #: Bytes of this stage's parameter gradients (fp32).
    grads: int = 0
    #: Extra bytes alive at this stage's forward peak, beyond what it and earlier stages saved.
    fwd_extra: int = 0
    #: Extra bytes alive at this stage's backward peak, beyond saved, gradients and grad_in.
    bwd_extra: int = 0
    #: Bytes of the gradient of this stage's output, alive while its backward runs.
    grad_in: int = 0


@dataclass
class Pending:
    """A gradient produced by one stage's backward and held until another stage's backward consumes it."""

    producer: str
    consumer: str
    bytes: int


@dataclass
class Peak:
    """The peak and the live set at that moment."""

    total: int
    phase: str
    parts: dict[str, int] = field(default_factory=dict)
    #: Every candidate moment considered, phase → total (for "where does the peak come from").
    candidates: dict[str, int] = field(default_factory=dict)


def peak(stages: list[Stage], static: dict[str, int], pending: list[Pending], optimizer_extra: int,
         pre_grads: bool = False) -> Peak:
    """Largest live set over the forward, the backward and the optimizer step (module docstring)."""
    base = sum(static.values())
    all_grads = sum(s.grads for s in stages)
    pre = all_grads if pre_grads else 0
    best = Peak(-1, "")

    candidates: dict[str, int] = {}

    def consider(total: int, phase: str, parts: dict[str, int]) -> None:
        nonlocal best
        candidates[phase] = max(total, candidates.get(phase, 0))
        if total > best.total:
            best = Peak(total, phase, {**static, **{k: v for k, v in parts.items() if v}})

    saved_by_group: dict[str, int] = {}
    for stage in stages:
        for key, value in stage.saved.items():
            saved_by_group[key] = saved_by_group.get(key, 0) + value
        consider(base + pre + sum(saved_by_group.values()) + stage.fwd_extra, f"forward: {stage.name}",
                 {**saved_by_group, "grads": pre, "forward transient": stage.fwd_extra})

    order = {s.name: i for i, s in enumerate(reversed(stages))}
    alive = dict(saved_by_group)
    done_grads = 0
    for i, stage in enumerate(reversed(stages)):
        grads = (all_grads + stage.grads) if pre_grads else (done_grads + stage.grads)
        held = sum(p.bytes for p in pending if order[p.producer] < i <= order[p.consumer])
        consider(base + sum(alive.values()) + grads + held + stage.grad_in + stage.bwd_extra,
                 f"backward: {stage.name}",
                 {**alive, "grads": grads, "pending gradients": held + stage.grad_in,
                  "backward transient": stage.bwd_extra})
        for key, value in stage.saved.items():
            alive[key] -= value
        done_grads += stage.grads
    consider(base + all_grads + optimizer_extra, "optimizer step",
             {"grads": all_grads, "optimizer transient": optimizer_extra})
    best.candidates = candidates
    return best



@dataclass(frozen=True)
class TaskLedger:
    """What a task's analytic memory model returns for one micro-batch (``spec.analytic_memory``).

    The task's model is ``ledger(config, micro_batch, precision, device) -> TaskLedger`` with
    ``precision`` "fp32"/"bf16"/"fp16" and ``device`` "cpu"/"cuda"; ``config`` already carries the
    settings being priced (engine.budget.settings.with_settings). engine.budget.analytic adds the static
    terms (weights, optimizer state, allocator rounding) around it.
    """

    stages: list
    pending: list
    #: Element count of every parameter tensor (weights, grads and the optimizer's states follow from it).
    param_tensors: list[int]
    #: Bytes of one micro-batch on the device.
    input_bytes: int
    #: Elements of the parameters an autocast forward copies to low precision (0 when it casts none).
    cast_elements: int = 0
    #: Saved activation tensors, a bound (the CUDA allocator rounds each up to a block).
    activation_tensors: int = 0
    #: Element counts of the parameter tensors that train (gradients, AdamW state); None: all of them.
    #: A LoRA model trains a few percent of its tensors, and only those get optimizer state.
    trainable_tensors: list[int] | None = None
