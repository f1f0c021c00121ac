"""One background thread building the next batches while the current step trains (the planned data path's
thread mode; worker processes are ``engine.training.batches``, on ``torch.utils.data``).

The loop asks for a batch by key (its sample indices and the step its masks are
drawn for); batches are pure functions of that key (the task protocol's
determinism contract), so a prefetched batch is bit-identical to one built
inline and resume stays exact. When a guess was wrong (the batch size was
tuned, an OOM changed the micro-batching, a resume moved the position) the
stale batch is dropped and the right one is built inline: a wasted build,
never a wrong batch.

Why a hand-written thread next to the DataLoader: ``torch.utils.data`` has
worker *processes* only (``num_workers=0`` builds in the caller, on demand),
and the plan (engine.training.threads) cannot always use processes: a short run never
repays starting them (1-3 s each), and where they fail to start (no fds or
memory left) the run goes on without them. There a thread still overlaps the
build with a step long enough (≥ ``threads.THREAD_STEP_S``) for torch's kernels
to leave it the GIL: measured by ``bench engine_overhead`` (engine with the
builder thread ÷ ``runtime.prefetch = false``, the row "prefetch on / off").
Costs: one thread and one batch in memory.

The thread is a daemon of its own, not a ThreadPoolExecutor's: an executor's
thread is joined at exit, and a stop that gave up a step while its batch was
built (a forced huge batch: engine.training.loop) then waited as long as that
build took. ``close(wait=False)`` leaves a build in progress to finish unseen.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from itertools import chain
from typing import Any, Callable, Hashable, Iterator, Sequence

import numpy as np


def step_keys(indices: Sequence[int], micro_batches: int, mask_step: int) -> list[tuple]:
    """A step's batch keys: its indices split into ``micro_batches`` (the first ones one larger when uneven),
    each with the step its masks are drawn for."""
    if micro_batches == 1:  # np.array_split costs ~20 µs a call: a tenth of a fast step's own budget
        return [(tuple(indices), mask_step)]  # SampleOrder.take gives Python ints already
    chunks = [c for c in np.array_split(np.asarray(indices), micro_batches) if len(c)]
    return [(tuple(c.tolist()), mask_step) for c in chunks]


def upcoming_keys(rest: Sequence[tuple], order, per_step: int, micro_batches: int, first_step: int, end: int,
                  masks: bool = True) -> Iterator[tuple]:
    """The keys the loop reads next: ``rest`` (this step's remaining ones), then those of steps ``first_step`` up
    to ``end`` as ``order`` (a ``SampleOrder`` copy, advanced as it goes) gives them, ``per_step`` samples a
    step in ``micro_batches``; ``masks`` False draws every step's masks for step 0 (overfit runs). Lazy."""
    later = (key for step in range(first_step, end)
             for key in step_keys(order.take(per_step), micro_batches, step if masks else 0))
    return chain(rest, later)


class _Builder:
    """One daemon thread building the keys submitted, in order, each into its Future (a cancelled one is skipped)."""

    def __init__(self, build: Callable[[Hashable], Any]) -> None:
        self._build = build
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="prefetch", daemon=True)
        self._thread.start()

    def submit(self, key: Hashable) -> Future:
        """Queue ``key``'s build; its Future."""
        future: Future = Future()
        self._queue.put((key, future))
        return future

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            key, future = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(self._build(key))
                except BaseException as exc:  # noqa: BLE001 - re-raised by take() in the training thread
                    future.set_exception(exc)

    def shutdown(self, wait: bool) -> None:
        """Stop after the builds queued (cancel them first); ``wait`` for the one in progress."""
        self._queue.put(None)
        if wait:
            self._thread.join()


class Prefetcher:
    """Builds the next batch on a thread; ``take`` returns a guessed one, else builds it inline."""

    def __init__(self, build: Callable[[Hashable], Any], enabled: bool = True) -> None:
        """``build(key)`` builds a batch (on the thread, and inline for a miss); ``enabled`` False: inline only."""
        self.build = build
        self.depth = 1 if enabled else 0
        self._pool = _Builder(build) if enabled else None
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
                self._pending[key] = self._pool.submit(key)

    def take(self, key: Hashable) -> Any:
        """``key``'s batch: the prefetched one if it was guessed (its exception re-raised), else built now."""
        future = self._pending.pop(key, None)
        if future is not None and not future.cancelled():
            self.hits += 1
            return future.result()
        self.misses += 1
        return self.build(key)

    def close(self, wait: bool = True) -> None:
        """Forget the pending guesses and stop the thread after its build in progress (``wait`` False: without
        waiting for it, a stop's)."""
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait)
            self._pool = None
