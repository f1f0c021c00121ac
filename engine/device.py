"""Device choice: CUDA when asked or available, else CPU; never a crash without CUDA (threads: engine.threads)."""

from __future__ import annotations

import torch


def resolve(kind: str) -> torch.device:
    """``auto`` → cuda if available else cpu; ``cuda`` without CUDA is a one-line error (ValueError)."""
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError("train.device='cuda' but CUDA is not available; allowed here: auto, cpu")
    if kind == "cpu" or (kind == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def describe(device: torch.device) -> str:
    """Human name: the GPU's name, or 'CPU (n threads)'."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    n = torch.get_num_threads()
    return f"CPU ({n} thread{'' if n == 1 else 's'})"

