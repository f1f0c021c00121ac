"""A step event's rates: steps/s, samples/s, tokens/s and model FLOPs utilisation, from one window. Torch-free.

All four come from the same steps, samples and seconds (``Throughput.rates``), so they agree: samples/s is
steps/s times the samples a step trained, tokens/s that times the tokens a sample holds. A viewer averaging
over several steps does the same over its window (engine.run.pace).

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
    """Turns steps, their samples and their seconds into a step event's rates (module docstring)."""

    def __init__(self, task, model, device_name: str, world: int = 1) -> None:
        """``world`` processes train together; the step's sample count is theirs together."""
        self.task, self.model = task, model
        peak = peak_flops(device_name)
        self.peak = peak * world if peak else None

    def rates(self, samples: int, seconds: float, steps: int = 1) -> dict[str, float]:
        """{"steps_per_s", "samples_per_s"[, "tokens_per_s", "mfu"]} for ``steps`` that trained ``samples`` in
        ``seconds`` (tokens and MFU only for a task that counts tokens); {} without time."""
        if seconds <= 0:
            return {}
        out = {"steps_per_s": steps / seconds, "samples_per_s": samples / seconds}
        tokens = self.task.tokens_per_sample()
        if tokens:
            per_s = samples * tokens / seconds
            flops = self.task.flops_per_token(self.model) if self.peak else 0.0
            out.update(tokens_per_s=per_s, mfu=per_s * flops / self.peak if flops else 0.0)
        return out
