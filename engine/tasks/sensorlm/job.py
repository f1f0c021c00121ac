"""SensorLM's losses over the job's batch, not one rank's: what makes N ranks train like one process.

Under DDP each rank runs the model on its share of the batch, and DDP
averages the gradients; that equals one process on the whole batch only when
every rank's loss is a mean over an equal share. Two of SensorLM's three
losses are not:

- the contrastive loss compares every sensor embedding with every caption
  embedding of the batch (B×B), and centres each side on the batch mean. So
  every rank gathers all ranks' embeddings (``gather``: an all-gather whose
  backward sends each rank the gradient of its own rows, summed over the
  ranks that used them) and computes the whole batch's loss; DDP's average of
  W copies of that gradient is the one-process gradient.
- the caption and reconstruction losses are means over the *counted* entries
  (non-pad tokens, recorded masked values), which differ between shares. Each
  rank divides its sum by the job's count over W (``total``: an all-reduce of
  the counts, no gradient), so the mean over ranks is the job's mean.

Outside a multi-process job (no process group, or one rank) every function is
the identity and the losses are exactly the one-process ones. Validation does
not come here (each rank's evaluation is its own). Cost: one all-gather of
two B×E embeddings and one all-reduce of two counts per micro-batch.
"""

from __future__ import annotations

import torch


def world() -> tuple[int, int]:
    """(ranks in the job, this rank) when a process group is up; (1, 0) otherwise."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


class _Gather(torch.autograd.Function):
    """All ranks' rows in rank order; the backward returns this rank's rows of the summed gradient.

    Written out because torch.distributed.nn's all_gather emulates its backward with all_to_all, which
    gloo (the CPU backend) does not implement; an all-reduce and a slice are the same sum.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # noqa: D102 - autograd's signature
        import torch.distributed as dist

        parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, x.contiguous())
        ctx.rank, ctx.rows = dist.get_rank(), len(x)
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # noqa: D102 - autograd's signature
        import torch.distributed as dist

        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad[ctx.rank * ctx.rows:(ctx.rank + 1) * ctx.rows]


def gather(x: torch.Tensor) -> torch.Tensor:
    """``x`` of every rank, concatenated in rank order, gradients flowing back to each rank (module docstring)."""
    return _Gather.apply(x) if world()[0] > 1 else x


def share(count: torch.Tensor, floor: float = 1.0) -> torch.Tensor:
    """The job's ``count`` (summed over ranks, at least ``floor``) over the ranks: what one rank's sum is divided by.

    The mean over ranks of ``sum_r / share`` is then Σ sum / max(Σ count, floor), one process's mean.
    """
    n, _ = world()
    total = count.detach().float()
    if n > 1:
        import torch.distributed as dist

        total = total.clone()
        dist.all_reduce(total)
    return total.clamp_min(floor) / n
