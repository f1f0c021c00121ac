"""Device choice and thread count: CUDA when asked or available, else CPU; never a crash without CUDA."""

from __future__ import annotations

import os

import torch


def resolve(kind: str) -> torch.device:
    """``auto`` → cuda if available else cpu; ``cuda`` without CUDA is a one-line error (ValueError)."""
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError("runtime.device='cuda' but CUDA is not available; allowed here: auto, cpu")
    if kind == "cpu" or (kind == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def describe(device: torch.device) -> str:
    """Human name: the GPU's name, or 'CPU (n threads)'."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    n = torch.get_num_threads()
    return f"CPU ({n} thread{'' if n == 1 else 's'})"


def set_threads(requested: int, ui_shares_machine: bool) -> int:
    """Set torch's intra-op threads: requested, or cores-1 when a UI shares the box (measured: the UI needs one)."""
    if requested > 0:
        threads = requested
    else:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        threads = max(1, cores - 1) if ui_shares_machine else cores
    torch.set_num_threads(threads)
    return threads


def release_cache(device: torch.device) -> tuple[int, int]:
    """Collect garbage and hand the allocator's cached blocks back: (reserved bytes before, after); (0, 0) on CPU."""
    import gc

    if device.type != "cuda":
        gc.collect()
        return 0, 0
    before = torch.cuda.memory_reserved(device)
    gc.collect()
    torch.cuda.empty_cache()
    return before, torch.cuda.memory_reserved(device)
