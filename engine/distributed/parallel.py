"""How the Trainer trains across processes: one process (``Single``) or DDP over a process group (``Ddp``).

The Trainer asks the strategy five things and knows nothing else about ranks:
``rank``/``world`` (its ``SampleOrder`` shard), ``wrap(model)`` (the module the
loss runs through), ``sync(final)`` (whether this micro-batch's backward
all-reduces gradients: only the last of a step's micro-batches does, DDP's
``no_sync`` on the others), ``mean(tensor)`` (the step's logged loss, averaged
over ranks, so rank 0 logs the job's loss) and ``agree(flag)`` (a decision
that changes control flow, True on every rank if True on any).

The batch size is global: each rank reads ``batch_size // world`` samples a
step. Every rank's loss is a mean over its equal share and DDP averages the
gradients, so the update equals one process's over the whole batch up to float
summation order (the all-reduce adds the two halves' gradients; one process
sums all samples in one reduction).
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import dataclass


@dataclass
class Single:
    """One process: every method is the identity; what the engine always did."""

    rank: int = 0
    world: int = 1

    @property
    def owner(self) -> bool:
        """True on the rank that owns the run directory (events, status, control socket, checkpoints)."""
        return self.rank == 0

    def wrap(self, model):
        """The module the training forward runs through."""
        return model

    def sync(self, final: bool):
        """Context for one micro-batch's forward and backward (gradient sync only when ``final``)."""
        return nullcontext()

    def mean(self, tensor):
        """``tensor`` averaged over ranks."""
        return tensor

    def agree(self, flag: bool) -> bool:
        """True on every rank if ``flag`` is True on any."""
        return bool(flag)

    def close(self) -> None:
        """Leave the process group (nothing to leave here)."""


def env_world() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's environment; (0, 1, 0) outside torchrun."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))


class Ddp(Single):
    """DistributedDataParallel over the default process group (gloo on CPU, nccl on CUDA)."""

    def __init__(self, device_type: str = "cpu", timeout_s: float = 300.0) -> None:
        """Join the process group torchrun's environment describes (MASTER_ADDR/PORT, RANK, WORLD_SIZE)."""
        import datetime

        import torch.distributed as dist

        rank, world, _ = env_world()
        super().__init__(rank, world)
        self._dist = dist
        self.backend = "nccl" if device_type == "cuda" else "gloo"
        if not dist.is_initialized():
            # The timeout bounds a collective whose peer hangs (a dead peer fails at once on gloo).
            dist.init_process_group(self.backend, timeout=datetime.timedelta(seconds=timeout_s))
        self._ddp = None

    def wrap(self, model):
        """``model`` inside DDP (the raw module stays the Trainer's for state dicts and evaluation)."""
        from torch.nn.parallel import DistributedDataParallel

        ids = [model_device.index] if (model_device := next(model.parameters()).device).type == "cuda" else None
        self._ddp = DistributedDataParallel(model, device_ids=ids)
        return self._ddp

    def sync(self, final: bool):
        """DDP's ``no_sync`` on every micro-batch but a step's last: one all-reduce a step, not one a micro-batch."""
        return nullcontext() if final or self._ddp is None else self._ddp.no_sync()

    def mean(self, tensor):
        """All-reduced average (one small collective a step: the logged loss and its parts, stacked)."""
        out = tensor.detach().clone()
        self._dist.all_reduce(out, op=self._dist.ReduceOp.SUM)
        return out / self.world

    def agree(self, flag: bool) -> bool:
        """MAX all-reduce of one flag: any rank's True is every rank's, so no rank waits alone in a collective."""
        import torch

        value = torch.tensor([1 if flag else 0], dtype=torch.int32)
        if self.backend == "nccl":
            value = value.cuda()
        self._dist.all_reduce(value, op=self._dist.ReduceOp.MAX)
        return bool(value.item())

    def gather(self, obj) -> list | None:
        """Every rank's ``obj`` on rank 0 (None elsewhere); a pickle over the group, for small records."""
        out = [None] * self.world if self.rank == 0 else None
        self._dist.gather_object(obj, out, dst=0)
        return out

    def broadcast(self, obj):
        """Rank 0's ``obj`` on every rank."""
        box = [obj]
        self._dist.broadcast_object_list(box, src=0)
        return box[0]

    def close(self) -> None:
        """Leave the process group (a clean exit; a crashed peer leaves this to the process's end)."""
        if self._dist.is_initialized():
            self._dist.destroy_process_group()
