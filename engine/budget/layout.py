"""How a job spreads over ranks, as far as one rank's memory is concerned. Torch-free.

The planner and the guard predict *one rank's* peak. Three things change it:

- the batch: ``train.batch_size`` is the job's; each rank reads
  ``batch_size // world`` samples a step (engine.training.sample_order.SampleOrder.per_rank),
  so its activations are those of its share, under every strategy;
- DDP (``ddp``): every rank holds the whole model, its gradients and AdamW
  state, plus the reducer's gradient buckets — a flat copy of every trainable
  gradient, allocated when DDP wraps the model (``gradient_as_bucket_view``
  is off by default; torch/nn/parallel/distributed.py);
- FSDP2 (``fsdp2``): parameters, gradients and optimizer state are divided by
  the shard count (the world), activations are not, and the root's unsharded
  parameters and one or two gathered blocks come on top
  (engine.tasks.ledger, ``Sharding``).

Every rank of a job predicts the same: the batch splits evenly and FSDP2 pads
every shard to the same size, so a single number stands for each rank (a
budget that differs per rank, e.g. mixed GPUs, is compared on each rank's own
device by whoever holds it).
"""

from __future__ import annotations

from dataclasses import dataclass

#: The strategies a multi-process job can use (``--strategy``).
STRATEGIES = ("ddp", "fsdp2")


@dataclass(frozen=True)
class Layout:
    """The job's world size and strategy (``single``: one process, no wrapper)."""

    world: int = 1
    strategy: str = "single"

    def __post_init__(self) -> None:
        if self.world < 1:
            raise ValueError(f"--nproc-per-node={self.world}: must be >= 1")
        if self.strategy not in ("single", *STRATEGIES):
            raise ValueError(f"--strategy={self.strategy}: expected one of {', '.join(STRATEGIES)}")

    @property
    def sharded(self) -> bool:
        """True when parameters, gradients and optimizer state are divided over the ranks (FSDP2)."""
        return self.strategy == "fsdp2"

    @property
    def single(self) -> bool:
        """True for one process without a wrapper: exactly the one-process predictions."""
        return self.strategy == "single"

    def rank_batch(self, batch_size: int) -> int:
        """Samples one rank reads a step for the job's ``batch_size``."""
        return max(1, batch_size // self.world)

    def describe(self) -> str:
        """'2 ranks, fsdp2' style text ('1 process' for a single one)."""
        if self.single:
            return "1 process"
        return f"{self.world} rank{'s' if self.world != 1 else ''}, {self.strategy}"

    def settings(self) -> dict:
        """What an Estimate's ``settings`` record about the layout (empty for one plain process)."""
        return {} if self.single else {"world": self.world, "strategy": self.strategy}


SINGLE = Layout()
