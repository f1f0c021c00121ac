"""The loop's batch source: built inline, on one thread or in DataLoader worker processes, as the thread plan says.

The plan (engine.training.threads) needs the batch ÷ step cost, and the only
honest way to know it is to measure this run: the first ``MEASURE_TAKES``
batches are built inline and timed against the gaps between ``take`` calls
(the compute on the previous batch), then the source re-plans and switches
mode. A batch of a size not seen before (a live batch-size change, an OOM
halving the micro-batch) measures again, and a viewer attaching or leaving
re-plans the torch threads. Every plan that differs from the last is one log
line, said at the end of a take (on the training thread, sinks attached).
"""

from __future__ import annotations

import itertools
import statistics
import time
from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterable, Sequence

from engine.core.core_sections import RuntimeConfig
from engine.training.threads import WORKER_AHEAD, Cores, Costs, Plan, plan, usable_cores

if TYPE_CHECKING:
    from engine.run import events as ev
    from engine.training.live_settings import LiveSettings

#: Batches built inline and timed before the data plan is made.
MEASURE_TAKES = 6
#: Seconds between checks whether a viewer attached or left.
VIEWER_POLL_S = 2.0


class PlannedPrefetcher:
    """The loop's batch source, whose mode follows the plan: inline or one thread (``engine.training.prefetch``), or
    DataLoader worker processes (``engine.training.batches``); the loop's interface (``take``, ``ahead``, ``depth``,
    ``close``, ``hits``, ``misses``).

    It times inline builds against the gaps between ``take`` calls to measure batch ÷ step, then
    re-plans; a batch of a size not seen before (a live batch-size change, an OOM halving the
    micro-batch) measures again. Costs: two clock reads a batch; nothing else once measured.
    """

    def __init__(self, build: Callable[[Hashable], Any], worker_args: Callable[[], tuple], runtime: RuntimeConfig,
                 steps_left: Callable[[], int], emit: Callable[[str], None], cores: Cores | None = None,
                 viewers: Callable[[], int] | None = None, pin_memory: bool = False) -> None:
        """``build(key)`` builds a batch here; ``worker_args()`` = (config as JSON, task state) for worker
        processes; ``runtime``: the run's asked-for threads, data workers and prefetch (the plan fills in the
        rest); ``pin_memory``: workers' batches into page-locked memory (a CUDA device's copies overlap)."""
        self._build = build
        self._pin = pin_memory
        self._worker_args = worker_args
        self._emit = emit
        self._threads, self._workers, self._prefetch = runtime.threads, runtime.data_workers, runtime.prefetch
        self._steps_left = steps_left
        self.cores = cores or usable_cores()
        #: How many viewers share the machine now (the engine process sets it once its control server runs).
        self.viewers = viewers or (lambda: 0)
        self._viewer = False
        self._costs: Costs | None = None
        self._sizes: set[int] = set()
        self._builds: list[float] = []
        self._gaps: list[float] = []
        self._last_take: float | None = None
        self._next_viewer_poll = 0.0
        self._inner = None
        self._plan: Plan | None = None
        self._said: tuple | None = None
        #: Why worker processes cannot be used here (set when they failed to start), empty while they can.
        self._no_workers = ""
        #: Lines said at the end of the next take (the training thread, sinks attached by then).
        self._pending_lines: list[str] = []
        self.hits = 0
        self.misses = 0
        # Overrides are final now; an automatic plan is said once it has measured (the bus has no sinks yet).
        self._apply(self._make_plan(), say=not self._auto())

    # -- the loop's interface
    @property
    def depth(self) -> int:
        """Batches built ahead in the current plan."""
        return self._inner.depth

    @property
    def plan(self) -> Plan:
        """The plan in force."""
        return self._plan

    def take(self, key: Hashable) -> Any:
        """``key``'s batch (see ``Prefetcher.take``), timing inline builds while measuring."""
        now = time.perf_counter()
        if now >= self._next_viewer_poll:
            self._next_viewer_poll = now + VIEWER_POLL_S
            self._check_viewer()
        size = len(key[0]) if isinstance(key, tuple) and key and hasattr(key[0], "__len__") else 0
        if size not in self._sizes:
            # A batch of a new size: the balance is measured again, except with worker processes, which would have
            # to stop for it and start again (seconds); build and step costs scale alike with the batch anyway.
            if self._auto() and not self._measuring() and self._plan.data != "workers":
                self._remeasure()
            self._sizes.add(size)
        measuring = self._measuring()
        if measuring and self._last_take is not None:
            self._gaps.append(now - self._last_take)
        before = self._inner.misses
        batch = self._inner.take(key)
        built = time.perf_counter()
        if self._inner.misses > before:
            self.misses += 1
            if measuring:
                self._builds.append(built - now)
        else:
            self.hits += 1
        self._last_take = built  # the gap to the next take is the compute on this batch, the build outside it
        if measuring and len(self._builds) >= MEASURE_TAKES and len(self._gaps) >= MEASURE_TAKES - 1:
            self._costs = Costs(statistics.median(self._builds), statistics.median(self._gaps))
            self._apply(self._make_plan(), say=True)
        while self._pending_lines:
            self._emit(self._pending_lines.pop(0))
        return batch

    def ahead(self, upcoming: Callable[[], Iterable[Hashable]] | Sequence[Hashable]) -> None:
        """Start building the next batches (nothing while data is built inline). ``upcoming``: the keys after the
        one just taken, in order, or a function returning them (called only when they are needed)."""
        keys = upcoming if callable(upcoming) else (lambda: upcoming)
        try:
            if self._plan.data == "workers":
                self._inner.ahead(keys)
            elif self._inner.depth:
                self._inner.ahead(list(itertools.islice(keys(), self._inner.depth)))
        except (RuntimeError, OSError, ValueError) as exc:  # ValueError: spawn's "bad value(s) in fds_to_keep"
            # Worker processes that cannot start (a script without `if __name__ == "__main__":` under spawn,
            # no fds or memory left) must not end the run: plan without them and build here or on a thread.
            if self._plan.data != "workers" or not self._auto():
                raise
            first = (str(exc).strip().splitlines() or [""])[0][:100]
            self._no_workers = f"worker processes could not start: {type(exc).__name__} {first}".rstrip()
            self._apply(self._make_plan(), say=True)

    def say(self, line: str) -> None:
        """Log ``line`` at the end of the next take (sinks are attached by then)."""
        self._pending_lines.append(line)

    def task_changed(self) -> None:
        """A live task setting changed how batches are built: worker processes (each holding the task as it was
        when it started) are replaced by fresh ones from the new state; the loop builds inline meanwhile."""
        if self._plan.data == "workers":
            self._inner.close()
            self._inner = None
            self._plan = None
            self._apply(self._make_plan(), say=False, restart=True)

    def override(self, threads: int | None = None, data_workers: int | None = None) -> None:
        """A live change of torch threads or data workers (``set``, autotune; -1 workers: planned again): applied at
        once; worker processes started now come up while the loop builds inline (``ready`` says when)."""
        self._threads = self._threads if threads is None else threads
        self._workers = self._workers if data_workers is None else data_workers
        self._apply(self._make_plan(), say=True, restart=True)

    @property
    def ready(self) -> bool:
        """False while the plan is still measuring its first batches or its worker processes are still starting
        (batches built inline meanwhile): a step then is not yet one of the plan's."""
        return not self._measuring() and (self._plan.data != "workers" or self._inner.ready)

    def close(self, wait: bool = True) -> None:
        """Stop the thread or the workers (``wait`` False: without waiting for a build in progress, a stop's)."""
        self._inner.close(wait)

    # -- planning
    def _auto(self) -> bool:
        return self._prefetch and self._workers < 0

    def _measuring(self) -> bool:
        return self._auto() and self._costs is None

    def _remeasure(self) -> None:
        self._costs, self._builds, self._gaps, self._last_take = None, [], [], None
        self._sizes.clear()
        self._apply(self._make_plan(), say=False)

    def _check_viewer(self) -> None:
        try:
            viewer = self.viewers() > 0
        except Exception:  # a viewer count that cannot be read is no viewer
            viewer = False
        if viewer != self._viewer:
            self._viewer = viewer
            self._apply(self._make_plan(), say=not self._measuring())

    def _make_plan(self) -> Plan:
        return plan(self.cores, self._viewer, self._costs, self._steps_left(), self._threads, self._workers,
                    self._prefetch, self._no_workers)

    def _apply(self, new: Plan, say: bool, restart: bool = False) -> None:
        import torch

        from engine.training.batches import WorkerBatches
        from engine.training.prefetch import Prefetcher

        old, self._plan = self._plan, new
        if torch.get_num_threads() != new.threads:
            torch.set_num_threads(new.threads)
        if old is None or (old.data, old.workers) != (new.data, new.workers):
            if self._inner is not None:
                self._inner.close()
            # Workers planned mid-run: built inline until every one is up (the loop never waits on a spawn);
            # asked for from the start (runtime.data_workers): waited for, so a worker's failure surfaces at once.
            if new.data == "workers":
                self._inner = WorkerBatches(self._build, new.workers, self._worker_args(), self._pin, WORKER_AHEAD,
                                            wait=old is None and not restart)
            else:
                self._inner = Prefetcher(self._build, enabled=new.data != "inline")
            self._last_take = None
        choice = (new.threads, new.data, new.workers)
        if say and choice != self._said:
            self._said = choice
            self._pending_lines.append(new.line())


def planned_source(task, settings: LiveSettings, steps_left: Callable[[], int], emit: Callable[[ev.Event], None],
                   pin_memory: bool) -> PlannedPrefetcher:
    """A run's planned batch source: ``task`` builds the batches (here, and in worker processes started from
    ``settings``' live config and the task's state); ``steps_left`` bounds what is worth starting; its lines go
    out as LogLine events on ``emit``."""
    from engine.run import events as ev

    def worker_args() -> tuple:
        return settings.config.model_dump(mode="json"), task.state_dict()  # live settings included

    from engine.training.allocator import keep_freed_memory
    from engine.training.batches import build_batch

    # The step's buffers from here on come from the tuned heap (engine.training.allocator).
    allocator = keep_freed_memory()
    source = PlannedPrefetcher(lambda key: build_batch(task, key), worker_args, settings.config.runtime,
                               steps_left=steps_left, emit=lambda text: emit(ev.LogLine(text=text, stream="engine")),
                               pin_memory=pin_memory)
    source.say(allocator)
    return source
