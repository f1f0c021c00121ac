"""Batches the data path keeps built ahead of the step: how many, and the bytes they add to a CPU budget.

The loop asks for each micro-batch by key, and while a step trains the data
path builds the next ones (engine.training.threads plans how,
engine.training.batch_source follows the plan): none when batches are built
inline, one on the builder thread (engine.training.prefetch), two per
DataLoader worker process (its ``prefetch_factor``, ``PER_WORKER``: each
worker's batches are built, queued in shared memory or received). The plan
is made at run time when ``runtime.data_workers`` is -1, from the measured
batch ÷ step cost: at most one worker per usable core, so the bound is
``PER_WORKER`` × the cores this process may run on (its affinity mask; the
plan also heeds a cgroup quota, which can only lower it).

Where they live: on the host. A CPU run's budget is the machine's RAM, which
the step's tensors share with those batches, so they are counted there (the
toy at length 10080, batch 8: 62 MB a batch, and the bound's margin was
8 kB). On CUDA only the micro-batch being trained is copied to the device;
the batches ahead stay in host memory and are not in a device budget.
"""

from __future__ import annotations

import os

#: Batches each DataLoader worker process keeps ahead (engine.training.threads.WORKER_AHEAD, its prefetch_factor).
PER_WORKER = 2


def cores() -> int:
    """The cores this process may run on (its affinity mask), at least one."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity call on this platform
        return max(1, os.cpu_count() or 1)


def depth(prefetch: bool, data_workers: int, usable: int) -> int:
    """Most batches built ahead for these settings: none with prefetch off, one on the builder thread
    (``data_workers`` 0), ``PER_WORKER`` per worker process, and for a planned data path (-1) as many as
    ``usable`` workers would keep."""
    if not prefetch:
        return 0
    if data_workers == 0:
        return 1
    return PER_WORKER * (data_workers if data_workers > 0 else max(1, usable))


def of(config, usable: int | None = None) -> int:
    """``depth`` for a RunConfig (``usable``: the cores to plan with; default this process's)."""
    r = config.runtime
    return depth(r.prefetch, r.data_workers, cores() if usable is None else usable)


def ahead_bytes(config, device: str, batch_bytes: int) -> tuple[int, int]:
    """(batches, bytes) built ahead that count against ``device``'s budget: on ``cpu`` ``of(config)`` batches of
    ``batch_bytes`` (one micro-batch, as the loop asks for them); on a GPU none (module docstring)."""
    if device != "cpu":
        return 0, 0
    n = of(config)
    return n, n * batch_bytes
