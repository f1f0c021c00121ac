"""Scale-out on torch.distributed: torchrun launches, DDP wraps, rank 0 owns the run directory.

- ``launch``: ``train --nproc-per-node N`` → a supervisor in its own session that runs torchrun
  (c10d rendezvous) with this package's ``worker`` as the entry point; torch-free.
- ``supervise``: runs torchrun in-process and, when a rank dies, writes which rank and its exit code
  into the run directory (the workers cannot: the one that knows is dead).
- ``parallel``: the strategy the Trainer trains through: ``Single`` (one process, identity) or ``Ddp``
  (process group, DDP wrapper, gradient sync only on the final micro-batch, all-reduced decisions).
- ``controls``: a ``Controls`` whose requests and stops are agreed at each step boundary, so every rank
  applies the same control at the same step.
- ``worker``: the per-rank entry point: rank 0 runs the engine as usual; other ranks train silently.
"""
