"""The toy task's step as a ledger (engine.tasks.ledger): the MLP of engine/tasks/toy/task.py. Torch-free.

S = toy.channels·toy.length values per sample, h = toy.dim, B micro-batch, fp32
(lp = 2 under autocast for the Linear outputs). Forward keeps: the
concatenated (masked, mask) input (B, 2S) for the first Linear; per hidden
layer the Linear output (GELU's input) and the GELU output (the next
Linear's input: the next stage's, freed after that Linear's backward); with
dropout > 0 its mask and output. The loss keeps the
difference (B, S) for the square's backward; at its peak the prediction, the
square and the masked square are alive too. Backward: ``flatten(1)``'s
backward materialises the expanded sum gradient (B·S), then the square's
gradient and pow's two temporaries (4·B·S in all), then per layer the input
and weight grads: one lp·B·h input gradient beside the incoming one (the head's
and each hidden Linear's; the GELU's before it). Counting two made the bound
+10.4 % over where the hidden width dominates (dim 256 over 64 values a
sample, the random configurations' bench).
"""

from __future__ import annotations

from engine.tasks.ledger import Pending, Stage, TaskLedger

F32 = 4


def param_tensors(config) -> dict[str, list[int]]:
    """Element counts of the MLP's parameter tensors by layer."""
    S = config.task_config.channels * config.task_config.length
    h, depth = config.task_config.dim, config.task_config.depth
    out = {"layer 0": [2 * S * h, h]}
    for i in range(1, depth):
        out[f"layer {i}"] = [h * h, h]
    out["head"] = [S * h, S]
    return out


def stages(config, B: int, lp: int) -> tuple[list[Stage], list[Pending]]:
    """The toy step's stages for micro-batch ``B`` (module docstring)."""
    S = config.task_config.channels * config.task_config.length
    t = config.task_config
    h, depth, p = t.dim, t.depth, t.dropout
    groups = {k: F32 * sum(v) for k, v in param_tensors(config).items()}
    act = "activations: mlp"
    # Each GELU output is kept by the next Linear (its input), so it is freed after that Linear's backward:
    # it belongs to the next stage (a hidden layer's, or the head's), not to the layer that made it.
    out = [Stage("layer 0", saved={act: F32 * 2 * B * S + lp * B * h}, grads=groups["layer 0"],
                 fwd_extra=2 * lp * B * h, bwd_extra=lp * B * h, grad_in=lp * B * h)]
    for i in range(1, depth):
        drop = (B * h + F32 * B * h) if p > 0 else 0  # bool mask and the scaled output
        # a hidden layer is an FSDP unit of its own (ToyTask.shard_units)
        out.append(Stage(f"layer {i}", saved={act: 2 * lp * B * h + drop}, grads=groups[f"layer {i}"],
                         fwd_extra=2 * lp * B * h, bwd_extra=lp * B * h, grad_in=lp * B * h,
                         units=(h * h + h,), unit_grads=groups[f"layer {i}"]))
    out.append(Stage("head", saved={act: lp * B * h}, grads=groups["head"], fwd_extra=lp * B * S,
                     bwd_extra=lp * B * h, grad_in=F32 * B * S))
    # The loss: diff kept; prediction, square and masked square at its peak; backward 3·B·S.
    out.append(Stage("loss", saved={"loss": F32 * B * S + 2 * F32 * B}, fwd_extra=3 * F32 * B * S,
                     bwd_extra=4 * F32 * B * S))
    return out, []


def input_bytes(config, B: int) -> int:
    """target, mask and masked: three (B, channels, length) float32 tensors."""
    return 3 * F32 * B * config.task_config.channels * config.task_config.length


def ledger(config, B: int, precision: str, device: str) -> TaskLedger:
    """The task's analytic memory model (``SPEC.analytic_memory``): the step's ledger for micro-batch ``B``."""
    lp = 2 if precision != "fp32" else F32
    st, pend = stages(config, B, lp)
    tensors = [n for group in param_tensors(config).values() for n in group]
    return TaskLedger(stages=st, pending=pend, param_tensors=tensors, input_bytes=input_bytes(config, B),
                      cast_elements=sum(tensors) if precision != "fp32" else 0,
                      activation_tensors=4 * config.task_config.depth + 20)
