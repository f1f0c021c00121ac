"""Tokens/s and model FLOPs utilisation for the step events, from what the task declares. Torch-free.

A task that trains on tokens says how many a sample holds
(``Task.tokens_per_sample()``) and what one costs to train
(``Task.flops_per_token(model)``: forward and backward, counted once by the
task, e.g. engine.tasks.lm.mfu). Here they become two step-event fields:

- ``tokens_per_s`` = samples/s × tokens per sample (0: the task counts none);
- ``mfu`` = tokens/s × FLOPs per token ÷ (the device's dense bf16 peak × the
  processes training), the PaLM definition. 0 means unknown: a CPU, a GPU
  missing from ``PEAKS``, or a task that counts no FLOPs; viewers show "–".
  (0 rather than None keeps the event's numeric fields plain floats, which
  the event log's columnar reader and fast JSON path rely on.)

Both are asked of the task at every logged step (a live sequence-length
change changes them); a task caches what is costly to count.
"""

from __future__ import annotations

#: Dense bf16 tensor-core peaks, FLOP/s, by device-name fragments; checked in order (PCIe before the SXM default).
PEAKS: tuple[tuple[tuple[str, ...], float], ...] = (
    (("H100", "PCIE"), 756e12),
    (("H100",), 989e12),
    (("H200",), 989e12),
    (("A100",), 312e12),
)


def peak_flops(device_name: str) -> float | None:
    """The dense bf16 peak of ``device_name`` (e.g. "NVIDIA H100 80GB HBM3"), None for CPUs and unknown devices."""
    name = (device_name or "").upper()
    if name.startswith("CPU"):
        return None
    for fragments, peak in PEAKS:
        if all(f in name for f in fragments):
            return peak
    return None


class Throughput:
    """Turns a step's samples and seconds into ``tokens_per_s`` and ``mfu`` (module docstring)."""

    def __init__(self, task, model, device_name: str, world: int = 1) -> None:
        """``world`` processes train together; the step's sample count is theirs together."""
        self.task, self.model = task, model
        peak = peak_flops(device_name)
        self.peak = peak * world if peak else None

    @classmethod
    def of(cls, trainer) -> "Throughput":
        """For a Trainer after it built its task and model (engine.training.loop)."""
        from engine.optim import device as dev

        return cls(trainer.task, trainer.model, dev.describe(trainer.device), trainer.parallel.world)

    def rates(self, samples: int, seconds: float) -> dict[str, float]:
        """{"tokens_per_s", "mfu"} for ``samples`` trained in ``seconds``; {} for a task without tokens."""
        tokens = self.task.tokens_per_sample()
        if not tokens or seconds <= 0:
            return {}
        per_s = samples * tokens / seconds
        flops = self.task.flops_per_token(self.model) if self.peak else 0.0
        return {"tokens_per_s": per_s, "mfu": per_s * flops / self.peak if flops else 0.0}
