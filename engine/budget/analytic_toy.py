"""The toy task's step as a ledger (engine.budget.ledger): the MLP of engine/tasks/toy.py. Torch-free.

S = channels·minutes values per sample, h = model.dim, B micro-batch, fp32
(lp = 2 under autocast for the Linear outputs). Forward keeps: the
concatenated (masked, mask) input (B, 2S) for the first Linear; per hidden
layer the Linear output (GELU's input) and the GELU output (the next
Linear's input); with dropout > 0 its mask and output. The loss keeps the
difference (B, S) for the square's backward; at its peak the prediction, the
square and the masked square are alive too. Backward: ``flatten(1)``'s
backward materialises the expanded sum gradient (B·S), then the square's
gradient and pow's two temporaries (4·B·S in all), then per layer the input
and weight grads.
"""

from __future__ import annotations

from engine.budget.ledger import Pending, Stage

F32 = 4


def param_tensors(config) -> dict[str, list[int]]:
    """Element counts of the MLP's parameter tensors by layer."""
    S = config.data.channels * config.data.minutes
    h, depth = config.model.dim, config.model.depth
    out = {"layer 0": [2 * S * h, h]}
    for i in range(1, depth):
        out[f"layer {i}"] = [h * h, h]
    out["head"] = [S * h, S]
    return out


def stages(config, B: int, lp: int) -> tuple[list[Stage], list[Pending]]:
    """The toy step's stages for micro-batch ``B`` (module docstring)."""
    S = config.data.channels * config.data.minutes
    h, depth, p = config.model.dim, config.model.depth, config.model.dropout
    groups = {k: F32 * sum(v) for k, v in param_tensors(config).items()}
    act = "activations: mlp"
    out = [Stage("layer 0", saved={act: F32 * 2 * B * S + 2 * lp * B * h}, grads=groups["layer 0"],
                 fwd_extra=lp * B * h, bwd_extra=lp * B * h, grad_in=lp * B * h)]
    for i in range(1, depth):
        drop = (B * h + F32 * B * h) if p > 0 else 0  # bool mask and the scaled output
        out.append(Stage(f"layer {i}", saved={act: 2 * lp * B * h + drop}, grads=groups[f"layer {i}"],
                         fwd_extra=lp * B * h, bwd_extra=2 * lp * B * h, grad_in=lp * B * h))
    out.append(Stage("head", saved={}, grads=groups["head"], fwd_extra=lp * B * S,
                     bwd_extra=2 * lp * B * h, grad_in=F32 * B * S))
    # The loss: diff kept; prediction, square and masked square at its peak; backward 3·B·S.
    out.append(Stage("loss", saved={"loss": F32 * B * S + 2 * F32 * B}, fwd_extra=3 * F32 * B * S,
                     bwd_extra=4 * F32 * B * S))
    return out, []


def input_bytes(config, B: int) -> int:
    """target, mask and masked: three (B, channels, minutes) float32 tensors."""
    return 3 * F32 * B * config.data.channels * config.data.minutes
