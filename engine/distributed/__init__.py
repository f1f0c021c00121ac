"""Scale-out on torch.distributed: torchrun launches, DDP or FSDP2 wraps, rank 0 owns the run directory.

- ``launch``: ``train --nproc-per-node N`` → a supervisor in its own session that runs torchrun
  (c10d rendezvous) with this package's ``worker`` as the entry point; torch-free.
- ``supervise``: runs torchrun in-process and, when a rank dies, writes which rank and its exit code
  into the run directory (the workers cannot: the one that knows is dead).
- ``parallel``: the strategy the Trainer trains through: ``Single`` (one process, identity) or ``Ddp``
  (process group, DDP wrapper, gradient sync only on the final micro-batch, all-reduced decisions).
- ``fsdp``: ``Fsdp2``, the FSDP2 strategy (``fully_shard`` per task block then the root, a precision
  policy from the run's precision; a process group of one outside torchrun).
- ``dcp`` and ``sharded_checkpointer``: FSDP2's checkpoints, one DCP ``step-N/`` directory per save with
  ``.metadata`` as the commit marker and rank 0's sidecar; ``last``/``best`` links; any world size on load.
- ``controls``: a ``Controls`` whose requests and stops are agreed at each step boundary, so every rank
  applies the same control at the same step.
- ``worker``: the per-rank entry point: rank 0 runs the engine as usual; other ranks train silently.
"""
