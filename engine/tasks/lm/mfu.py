"""FLOPs per trained token of a causal LM, counted once; MFU against the peak table is
engine.training.throughput's. Torch-free.

FLOPs per trained token (the PaLM appendix-B count, split by what trains)::

    forward           2 · N_matmul            every weight matrix, once (lm_head included,
                                              the input embedding is a lookup and is not)
    backward, inputs  2 · N_matmul            needed to reach earlier layers, frozen or not
    backward, weights 2 · N_trainable_matmul  only for what trains (LoRA: the adapters)
    attention         12 · L · H · Q · T      QKᵀ and AV forward (4·L·H·Q·T) and backward (×2)

so a full fine-tune costs the familiar 6N + 12·L·H·Q·T and LoRA 4N + 6·N_lora + 12·L·H·Q·T.
MFU = tokens/s × FLOPs/token ÷ peak (engine.training.throughput: the dense bf16 number
of the GPU's datasheet; on a CPU or an unknown device there is no peak and
MFU is shown "–").
"""

from __future__ import annotations


def flops_per_token(matmul_params: int, trainable_matmul_params: int, layers: int, heads: int, head_dim: int,
                    seq_len: int) -> float:
    """Training FLOPs per token (module docstring)."""
    return 4.0 * matmul_params + 2.0 * trainable_matmul_params + 12.0 * layers * heads * head_dim * seq_len
