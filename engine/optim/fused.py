"""Which AdamW runs: the fused kernel wherever the run allows it (torch-free, so the analytic budget agrees).

Why fused. torch's default AdamW on CPU is a Python loop over the parameter
tensors (``foreach`` is its default on CUDA only). The fused kernel updates
every tensor in one call: on the bundled sensor demo (86 tensors, 0.53 M
parameters, 1 thread) ``step()`` takes 1.0 ms against 5.7 ms for the loop
(4.4 ms with ``foreach``), ~8 % of the step. It also allocates no
parameter-sized temporaries (the loop's ``denom`` of the largest tensor, two
of them at once; foreach's sqrt of a whole group), so the memory budget drops
that transient for fused runs. Numbers differ from the loop's in the last bits,
the same way every step: a resume stays bit-exact.

Where not: FSDP2 (parameters are DTensor shards, and the fused kernel is not
among DTensor's sharded ops on every backend), fp16 (its GradScaler would hand
the kernel its scale, which the memory tracer's scaler skips on fake tensors),
and devices without the kernel (``engine.optim.optimization.adamw`` checks each
parameter).
"""

from __future__ import annotations


def fused_adamw(precision: str, sharded: bool) -> bool:
    """Whether a run with this precision ("fp32"/"bf16"/"fp16") and sharding (FSDP2) steps with fused AdamW."""
    return precision != "fp16" and not sharded
