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
allocated (``pre``), each stage adding only a transient copy of its largest
gradient (``Stage.grad_piece``) before the in-place accumulate.

This is an upper bound by construction when every term is (each stage's
bounds are derived in the module that builds it), and it is tight when the
terms are the live sets autograd really has.

One rank of an FSDP2 job (``Sharding``; the wrapping of
engine.distributed.fsdp, Task.shard_units) sees the same stages with four changes. The
static terms arrive already divided by the shard count (the caller's job).
The root's parameters are whole from its first forward until its backward
ends (the root does not reshard after forward). A stage's FSDP units
(``Stage.units``: a transformer's blocks) are all-gathered one at a time: at
the gather the flat all-gather output and the unsharded copy both exist, and
in backward the next unit (in backward order) is prefetched while the current
one runs. And when the micro-batch syncs, a unit's gradients live unsharded
only until its reduce-scatter (input copy beside them, then this rank's
shard), so done gradients count ``1/world``; the root's stay whole until the
end of the backward. A micro-batch that does not sync (gradient accumulation,
``set_requires_gradient_sync(False)``) keeps every gradient unsharded, as
without sharding. The optimizer step sees only shards.
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
    #: Parameter elements of each FSDP unit (Task.shard_units: a block) this stage runs; () when
    #: its parameters belong to the root. Only a sharded (FSDP2) estimate reads it.
    units: tuple[int, ...] = ()
    #: Bytes of ``grads`` that belong to those units (the rest are the root's).
    unit_grads: int = 0
    #: Bytes of the largest single gradient its backward makes. With gradients already there (a later
    #: micro-batch of gradient accumulation) autograd adds each into its parameter's ``.grad`` in place and
    #: frees it before the next is made, so one of these, not all of ``grads``, is the transient; None: all.
    grad_piece: int | None = None


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


@dataclass(frozen=True)
class Sharding:
    """One rank of an FSDP2 job over ``world`` ranks (module docstring)."""

    world: int
    #: Bytes of the root's parameters, whole from its first forward until its backward ends.
    root: int
    #: Whether this micro-batch reduce-scatters its gradients (False: accumulation keeps them unsharded).
    sync: bool = True


F32 = 4


def peak(stages: list[Stage], static: dict[str, int], pending: list[Pending], optimizer_extra: int,
         pre_grads: bool = False, sharding: Sharding | None = None) -> Peak:
    """Largest live set over the forward, the backward and the optimizer step (module docstring)."""
    if sharding is not None:
        return _sharded_peak(stages, static, pending, optimizer_extra, pre_grads, sharding)
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
        grads = (all_grads + _piece(stage)) if pre_grads else (done_grads + stage.grads)
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


def _piece(stage: Stage) -> int:
    """The transient gradient of a stage whose parameters already hold gradients (``Stage.grad_piece``)."""
    return stage.grads if stage.grad_piece is None else min(stage.grad_piece, stage.grads)


def _unit(stage: Stage) -> int:
    """Bytes of the largest FSDP unit a stage gathers (fp32 parameters)."""
    return F32 * max(stage.units, default=0)


def _sharded_peak(stages: list[Stage], static: dict[str, int], pending: list[Pending], optimizer_extra: int,
                  pre_grads: bool, sh: Sharding) -> Peak:
    """``peak`` for one rank of an FSDP2 job (module docstring: the four changes)."""
    W, root = sh.world, sh.root
    base = sum(static.values())
    all_grads = sum(s.grads for s in stages)
    keep_whole = pre_grads or not sh.sync  # accumulation: gradients unsharded until the final micro-batch
    pre = all_grads if pre_grads else 0
    best = Peak(-1, "")
    candidates: dict[str, int] = {}

    def consider(phase: str, parts: dict[str, int]) -> None:
        nonlocal best
        total = base + sum(parts.values())
        candidates[phase] = max(total, candidates.get(phase, 0))
        if total > best.total:
            best = Peak(total, phase, {**static, **{k: v for k, v in parts.items() if v}})

    # the root's own gather, before anything runs: flat all-gather output beside the unsharded copy
    consider("forward: root (all-gather)", {"grads": pre, "root parameters (gathered)": 2 * root})
    saved_by_group: dict[str, int] = {}
    for stage in stages:
        unit = _unit(stage)
        if unit:  # the gather: flat all-gather output and the unsharded parameters it is copied into
            consider(f"forward: {stage.name} (all-gather)",
                     {**saved_by_group, "grads": pre, "root parameters (gathered)": root,
                      "unit parameters (gathered)": 2 * unit})
        for key, value in stage.saved.items():
            saved_by_group[key] = saved_by_group.get(key, 0) + value
        consider(f"forward: {stage.name}", {**saved_by_group, "grads": pre, "root parameters (gathered)": root,
                                            "unit parameters (gathered)": unit,
                                            "forward transient": stage.fwd_extra})

    order = {s.name: i for i, s in enumerate(reversed(stages))}
    backward = list(reversed(stages))
    alive = dict(saved_by_group)
    done_root = done_units = 0
    for i, stage in enumerate(backward):
        after = backward[i + 1] if i + 1 < len(backward) else None
        gathered = _unit(stage) + (_unit(after) if after is not None else 0)  # current + prefetched
        root_grads = stage.grads - stage.unit_grads
        if keep_whole:
            grads = (all_grads + _piece(stage)) if pre_grads else (done_root + done_units + stage.grads)
        else:
            grads = done_root + done_units // W + root_grads + stage.unit_grads
        held = sum(p.bytes for p in pending if order[p.producer] < i <= order[p.consumer])
        consider(f"backward: {stage.name}",
                 {**alive, "grads": grads, "pending gradients": held + stage.grad_in,
                  "backward transient": stage.bwd_extra, "root parameters (gathered)": root,
                  "unit parameters (gathered)": gathered})
        for key, value in stage.saved.items():
            alive[key] -= value
        if stage.unit_grads and not keep_whole:
            # the reduce-scatter: the unit's gradients, their flat copy, and this rank's shard of them
            per_unit = stage.unit_grads // max(1, len(stage.units))
            consider(f"backward: {stage.name} (reduce-scatter)",
                     {**alive, "grads": done_root + done_units // W + root_grads + stage.unit_grads
                      + per_unit + per_unit // W,
                      "root parameters (gathered)": root, "unit parameters (gathered)": gathered})
        done_root += root_grads
        done_units += stage.unit_grads
    if done_root and not keep_whole:  # the backward's end: the root resharded, its gradients reduce-scattered
        consider("backward: root (reduce-scatter)",
                 {"grads": done_units // W + 2 * done_root + done_root // W})
    consider("optimizer step", {"grads": -(-all_grads // W), "optimizer transient": optimizer_extra})
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
    #: Parameter elements inside FSDP units, each unit once (None: the sum of the stages' ``units``; a task
    #: whose blocks run in two stages (e.g. two encoder passes over shared blocks) says it here). The rest is the root.
    unit_elements: int | None = None
