"""One batch built ahead on a background thread while the current step trains.

The loop asks for a batch by key (its sample indices and the step its masks are
drawn for); batches are pure functions of that key (the task protocol's
determinism contract), so a prefetched batch is bit-identical to one built
inline and resume stays exact. When the guess was wrong (the batch size was
tuned, an OOM changed the micro-batching, a resume moved the position) the
stale batch is dropped and the right one is built inline: a wasted build,
never a wrong batch.

What it buys: building a ``demo`` batch is numpy and Python on the CPU (about
40 % of a serial demo step on one core, ``bench sensorlm_throughput``); torch
releases the GIL inside its kernels, so the build overlaps the step's forward
and backward. The cost: one thread and at most one batch of host memory ahead.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Hashable


class Prefetcher:
    """Builds at most one batch ahead; ``take`` returns it when the key matches, else builds inline."""

    def __init__(self, build: Callable[[Hashable], Any], enabled: bool = True) -> None:
        self.build = build
        self.enabled = enabled
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch") if enabled else None
        self._key: Hashable | None = None
        self._future: Future | None = None
        #: Batches served from the thread / built inline (a guess that missed, or prefetch off).
        self.hits = 0
        self.misses = 0

    def ahead(self, key: Hashable) -> None:
        """Start building ``key``'s batch in the background (replacing any other pending guess)."""
        if self._pool is None or key == self._key:
            return
        self._drop()
        self._key, self._future = key, self._pool.submit(self.build, key)

    def take(self, key: Hashable) -> Any:
        """``key``'s batch: the prefetched one if it was guessed (its exception re-raised), else built now."""
        if self._future is not None and key == self._key:
            future, self._key, self._future = self._future, None, None
            self.hits += 1
            return future.result()
        self._drop()
        self.misses += 1
        return self.build(key)

    def _drop(self) -> None:
        if self._future is not None:
            self._future.cancel()  # still queued: never runs; already running: finishes, result discarded
        self._key, self._future = None, None

    def close(self) -> None:
        """Forget the pending guess and stop the thread (waiting for a build in progress)."""
        self._drop()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
