"""The true peak of one training step on CPU, counted through the dispatcher, and the process's RSS.

CPU has no allocator counter that means "training memory" (RSS mixes in the
interpreter, libraries and freed-but-kept pages: research/memory.md). What a
step really holds is the set of tensor storages alive during it, and every
storage a step creates or uses passes through the dispatcher. ``StepPeak`` is
a ``TorchDispatchMode`` that, around one step:

- starts from the storages that exist before it and that the step holds
  (parameters, buffers, gradients, optimizer state: ``held``);
- adds each storage an op reads or returns the first time it is seen (the
  batch, activations, gradients, optimizer temporaries), keyed by the
  storage itself, so views and tied weights count once;
- subtracts a storage when it is freed (a ``weakref.finalize`` on the
  storage object, which torch keeps alive exactly as long as the storage);
- keeps the running maximum: ``peak``.

It sees what MemTracker and the profiler see, minus kernels' internal scratch
that never becomes a tensor (bench cpu_memory compares it with both, held
out, on two presets). Cost: ~10–30 µs of Python per op while active, so the
engine measures one step in ``engine.budget.hook.CPU_MEASURE_EVERY``, not
every step (the same bench measures the throughput cost). Imports torch.
"""

from __future__ import annotations

import weakref
from typing import Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


def held_tensors(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> list[torch.Tensor]:
    """Tensors a training step keeps across steps: parameters, buffers, gradients, optimizer state."""
    out = [*model.parameters(), *model.buffers()]
    out += [p.grad for p in model.parameters() if p.grad is not None]
    if optimizer is not None:
        for state in optimizer.state.values():
            out += [v for v in state.values() if torch.is_tensor(v)]
    return out


class StepPeak(TorchDispatchMode):
    """Counts live tensor storages while active; ``peak`` is the most bytes alive at once (module docstring)."""

    def __init__(self, held: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()
        self._live: dict[int, int] = {}
        #: Bytes of the counted storages alive now.
        self.current = 0
        #: Most bytes alive at once since the mode was created.
        self.peak = 0
        for tensor in held:
            self._see(tensor)

    def _see(self, tensor: torch.Tensor) -> None:
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse / nested / functional wrappers: no plain storage
            return
        key = storage._cdata
        if key in self._live or storage.device.type == "meta":
            return
        size = storage.nbytes()
        self._live[key] = size
        self.current += size
        if self.current > self.peak:
            self.peak = self.current
        weakref.finalize(storage, self._free, key)

    def _free(self, key: int) -> None:
        self.current -= self._live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for leaf in tree_leaves((args, kwargs)):
            if isinstance(leaf, torch.Tensor):
                self._see(leaf)
        out = func(*args, **kwargs)
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self._see(leaf)
        return out


def rss() -> int | None:
    """Resident set size of this process (bytes), or None when psutil cannot say."""
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except Exception:
        return None


def available_ram() -> tuple[int | None, int | None]:
    """(available, total) RAM of the machine in bytes (psutil), or (None, None)."""
    try:
        import psutil

        memory = psutil.virtual_memory()
        return int(memory.available), int(memory.total)
    except Exception:
        return None, None
