"""Host syncs a step, counted on CPU on the code path a CUDA run takes (the deferred readback's or not).

On CPU nothing blocks, so what ``SyncCounter`` counts is the calls that would block on CUDA: a device
tensor read to the host (``item``, ``tolist``, ``bool``/``float``/``int`` of a tensor, ``numpy``, ``cpu``),
each attributed to the step the trainer was at; the deferred readback's own host buffers are not device
tensors and are left out. It cannot see a sync inside a kernel or CUDA's implicit ones (a copy from
pageable memory): the GPU script counts the real ones with ``torch.cuda.set_sync_debug_mode``.
"""

from __future__ import annotations

from torch.overrides import TorchFunctionMode

#: Tensor methods that copy a device tensor's value to the host, waiting for the device to produce it.
READS = {"item", "tolist", "__bool__", "__float__", "__int__", "__index__", "numpy", "cpu"}


class SyncCounter(TorchFunctionMode):
    """Counts host reads of tensors, by the trainer's step at the time (the step being trained is step + 1)."""

    def __init__(self, trainer) -> None:
        super().__init__()
        self.trainer = trainer
        self.by_step: dict[int, int] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        import torch

        if getattr(func, "__name__", "") in READS and args and isinstance(args[0], torch.Tensor):
            readback = getattr(self.trainer, "readback", None)
            if readback is None or not readback.is_host(args[0]):
                self.by_step[self.trainer.step] = self.by_step.get(self.trainer.step, 0) + 1
        return func(*args, **(kwargs or {}))

    def per_step(self, settle_steps: set[int], steps: int) -> float:
        """Mean reads a step over the steps that do not settle (evaluations, checkpoints)."""
        plain = [s for s in range(1, steps) if s not in settle_steps]
        return sum(self.by_step.get(s, 0) for s in plain) / max(1, len(plain))


def count(config, steps: int) -> float:
    """Host reads a plain step (no evaluation, no checkpoint) of ``config`` trained ``steps`` steps in-process."""
    import torch

    from engine.run.sinks import EventBus
    from engine.training.loop import Trainer

    torch.set_num_threads(1)
    trainer = Trainer(config, EventBus())
    trainer.setup()
    trainer.optim.host_read = "stacked"  # how a CUDA run reads the step's values (CPU reads them one by one)
    with SyncCounter(trainer) as counter:
        trainer.run()
    return counter.per_step({0, steps}, steps)
