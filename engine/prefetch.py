"""Batches built ahead while the current step trains: one background thread, or worker processes.

The loop asks for a batch by key (its sample indices and the step its masks are
drawn for); batches are pure functions of that key (the task protocol's
determinism contract), so a prefetched batch is bit-identical to one built
inline and resume stays exact. When a guess was wrong (the batch size was
tuned, an OOM changed the micro-batching, a resume moved the position) the
stale batches are dropped and the right one is built inline: wasted builds,
never a wrong batch.

Two ways, ``train.data_workers``:

* ``0`` (default): one thread builds the next batch. Torch releases the GIL
  inside its kernels, so the build overlaps the step; but the build itself is
  Python and numpy that hold the GIL much of the time, so on a small model the
  two still take turns (``bench engine_overhead``: ×1.37 on ``demo``).
* ``N ≥ 1``: N processes, each with its own copy of the task (rebuilt from the
  config and the task state: tokenizer, normalisation), build up to N batches
  ahead with no GIL in common. For a GPU, whose steps are short while data is
  made on the CPU. Costs: N interpreters with torch imported (~1-3 s to start,
  in the background; the first batches are built inline until a worker is up)
  and each batch pickled back to the trainer (a few ms for a ``demo`` batch).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, Callable, Hashable, Sequence

import numpy as np

# Worker-process state: the task each worker rebuilt once (see ``_init_worker``).
_WORKER_TASK = None


def _init_worker(config_json: dict, task_state: dict | None, trainer_pid: int | None = None) -> None:
    """Process-pool initializer: rebuild the task from its config and state, one torch thread.

    ``trainer_pid`` is the trainer's pid as the trainer knows it: reading ``os.getppid()`` here instead
    would record init's pid 1 when the trainer died while this worker was still starting (spawn and
    import torch take seconds), and the watch below would then wait forever (measured: orphans left
    behind by the test suite, 240 MB each).
    """
    global _WORKER_TASK
    parent = trainer_pid or os.getppid()
    if os.getppid() != parent:
        os._exit(0)  # the trainer is gone already
    _exit_with_parent(parent)
    import torch

    from engine import config as cfg
    from engine.tasks import make_task

    torch.set_num_threads(1)  # N workers beside the trainer: one core each, not N × all cores
    task = make_task(cfg.validate(config_json, "data worker"))
    task.setup(task_state)
    _WORKER_TASK = task


def _exit_with_parent(parent: int) -> None:
    """A daemon thread ending this worker once its trainer is gone (a SIGKILLed engine leaves no orphans)."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def build_batch(task, key: tuple) -> dict:
    """The training batch of ``key`` = (sample indices, the step its masks are drawn for), on the host."""
    indices, step = key
    return task.make_batch(list(indices), step, train=True)


def step_keys(indices: Sequence[int], micro_batches: int, mask_step: int) -> list[tuple]:
    """A step's batch keys: its indices split into ``micro_batches`` (the first ones one larger when uneven),
    each with the step its masks are drawn for."""
    if micro_batches == 1:  # np.array_split costs ~20 µs a call: a tenth of a fast step's own budget
        return [(tuple(int(i) for i in indices), mask_step)]
    chunks = [c for c in np.array_split(np.asarray(indices), micro_batches) if len(c)]
    return [(tuple(c.tolist()), mask_step) for c in chunks]


def lookahead(keys: Sequence[Hashable], done: int, depth: int,
              later: Callable[[int], Sequence[Sequence[Hashable]]]) -> list[Hashable]:
    """The next ``depth`` keys after ``keys[:done]``: the rest of this step's, then ``later(n)``'s n next steps'."""
    ahead = list(keys[done:])
    if len(ahead) < depth:
        for step_keys in later(-(-(depth - len(ahead)) // max(1, len(keys)))):
            ahead += list(step_keys)
    return ahead[:depth]


def _build_in_worker(key: tuple) -> dict:
    return build_batch(_WORKER_TASK, key)


class Prefetcher:
    """Builds up to ``depth`` batches ahead; ``take`` returns a guessed one, else builds it inline."""

    def __init__(self, build: Callable[[Hashable], Any], enabled: bool = True, workers: int = 0,
                 worker_args: tuple | None = None, wait_for_workers: bool = True) -> None:
        """``build(key)`` builds inline (and on the thread); ``workers`` > 0 with ``worker_args``
        = (config as JSON, task state) builds in that many processes instead. ``wait_for_workers`` False:
        until the first worker result arrives, a batch not yet built is built inline rather than waited
        for (workers started mid-run take seconds to spawn and import torch; the loop must not stall)."""
        self.build = build
        self._warm = wait_for_workers
        self.depth = max(1, workers) if enabled else 0
        self._pool: Executor | None = None
        self._remote = False
        if enabled and workers > 0 and worker_args is not None:
            # spawn, not fork: the trainer has torch (and its OpenMP pool) loaded, which fork does not survive.
            self._pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_init_worker, initargs=(*worker_args, os.getpid()))
            self._remote = True
        elif enabled:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch")
        self._pending: dict[Hashable, Future] = {}
        #: Batches served from the prefetch / built inline (a guess that missed, or prefetch off).
        self.hits = 0
        self.misses = 0

    def ahead(self, keys: Sequence[Hashable]) -> None:
        """Start building the batches of ``keys`` (the next ones, in order; at most ``depth`` are kept)."""
        if self._pool is None:
            return
        wanted = list(dict.fromkeys(keys))[: self.depth]
        for key in [k for k in self._pending if k not in wanted]:
            self._pending.pop(key).cancel()  # queued: never runs; running: finishes, result discarded
        for key in wanted:
            if key not in self._pending:
                self._pending[key] = self._pool.submit(_build_in_worker if self._remote else self.build, key)

    def take(self, key: Hashable) -> Any:
        """``key``'s batch: the prefetched one if it was guessed (its exception re-raised), else built now."""
        future = self._pending.pop(key, None)
        if future is not None and not future.cancelled():
            if not self._warm and not future.done():
                future.cancel()  # a worker still starting: build this one here (a running build is discarded)
                self.misses += 1
                return self.build(key)
            self._warm = True
            self.hits += 1
            return future.result()
        self.misses += 1
        return self.build(key)

    def close(self) -> None:
        """Forget the pending guesses and stop the thread (after its build in progress) or the workers (now)."""
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()
        if self._pool is not None:
            if self._remote:
                # Workers hold nothing anyone waits for; one still starting (spawn, import torch: seconds on a
                # busy box) would otherwise hold up a stop (SIGTERM, abort) until it is up. Python 3.14 has
                # ProcessPoolExecutor.terminate_workers(); before it, the pool's process table.
                for process in list((getattr(self._pool, "_processes", None) or {}).values()):
                    process.terminate()
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
