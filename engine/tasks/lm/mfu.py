"""Model FLOPs utilisation: FLOPs per token counted once, against the device's dense bf16 peak. Torch-free.

FLOPs per trained token (the PaLM appendix-B count, split by what trains)::

    forward           2 · N_matmul            every weight matrix, once (lm_head included,
                                              the input embedding is a lookup and is not)
    backward, inputs  2 · N_matmul            needed to reach earlier layers, frozen or not
    backward, weights 2 · N_trainable_matmul  only for what trains (LoRA: the adapters)
    attention         12 · L · H · Q · T      QKᵀ and AV forward (4·L·H·Q·T) and backward (×2)

so a full fine-tune costs the familiar 6N + 12·L·H·Q·T and LoRA 4N + 6·N_lora + 12·L·H·Q·T.
MFU = tokens/s × FLOPs/token ÷ peak; the peak is the dense bf16 number of
the GPU's datasheet, and on a CPU or an unknown device there is no peak and
MFU is None (shown "–").
"""

from __future__ import annotations

#: Dense bf16 tensor-core peaks, FLOP/s, by device-name fragment; checked in order (PCIe before the SXM default).
PEAKS: tuple[tuple[tuple[str, ...], float], ...] = (
    (("H100", "PCIE"), 756e12),
    (("H100",), 989e12),
    (("H200",), 989e12),
    (("A100",), 312e12),
)


def peak_flops(device_name: str) -> float | None:
    """The dense bf16 peak of ``device_name`` (e.g. "NVIDIA H100 80GB HBM3"), None for CPUs and unknown devices."""
    name = (device_name or "").upper()
    for fragments, peak in PEAKS:
        if all(f in name for f in fragments):
            return peak
    return None


def flops_per_token(matmul_params: int, trainable_matmul_params: int, layers: int, heads: int, head_dim: int,
                    seq_len: int) -> float:
    """Training FLOPs per token (module docstring)."""
    return 4.0 * matmul_params + 2.0 * trainable_matmul_params + 12.0 * layers * heads * head_dim * seq_len


def mfu(tokens_per_s: float, flops_token: float, device_name: str) -> float | None:
    """Fraction of the device's peak the run achieves (0..1), or None where there is no peak (CPU)."""
    peak = peak_flops(device_name)
    if peak is None or tokens_per_s <= 0:
        return None
    return tokens_per_s * flops_token / peak


def format_mfu(value: float | None) -> str:
    """"41.2 %" or "–" (no peak: CPU, unknown GPU)."""
    return "–" if value is None else f"{100 * value:.1f} %"
