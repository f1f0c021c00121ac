"""Batches through ``torch.utils.data``: a Sampler of the loop's batch keys and DataLoader worker processes.

The loop reads batch *keys* (a micro-batch's sample indices and the step its
masks are drawn for) in the order ``SampleOrder`` gives; a batch is a pure
function of its key (the task protocol's determinism contract). So the data
path is three library pieces:

* ``TaskBatches``, a map-style ``Dataset`` whose item ``key`` is the task's
  batch for that key. A worker process rebuilds the task once from the run's
  config and task state (tokenizer, normalisation), not by pickling the live one.
* ``KeySampler``, a ``Sampler`` yielding the keys the loop will read, from the
  position of its last *cut*. Its state is that position (the loop's own
  ``SampleOrder`` state, batch size and micro-batching): nothing is saved for
  it, and a resume simply cuts at the restored position. A live batch-size
  change, an OOM back-off or a mid-run start re-cuts it.
* a ``DataLoader`` over the two with ``num_workers`` worker processes
  (spawned: the trainer has torch's OpenMP pool loaded, which fork does not
  survive), ``persistent_workers`` so a re-cut keeps them, its own RNG
  generator so starting it never draws from the global RNG a resume restores,
  and batches returned through shared memory rather than pickled.

Why not torchdata's ``StatefulDataLoader``: it would snapshot the sampler where
the loader has yielded up to, but the engine's checkpoint already holds the
exact position (``SampleOrder``), taken at step boundaries; a resume re-cuts
the sampler there, which is all the state there is.

Under the in-process dashboard. Textual replaces ``sys.stdout``/``sys.stderr``
with objects whose ``fileno()`` is -1, and the first spawn starts
multiprocessing's resource tracker with ``sys.stderr.fileno()`` among the fds
it keeps: "bad value(s) in fds_to_keep". So the loader is started with both
streams pointed at ``os.devnull`` for the few milliseconds the spawns take
(``_stdio_for_spawn``; a ``print`` from another thread in that window is lost),
and each worker points its own fds 1 and 2 at ``os.devnull``, since they are
the dashboard's terminal: a warning written there would tear the screen. A
worker's exception still reaches the trainer, which DataLoader re-raises there.

Exactness: every batch the loader yields is checked against the key the loop
asks for (``take``); anything else is built inline and the sampler is re-cut.
Tickets carry a *generation*; a re-cut bumps it, and a worker handed a ticket
of an older generation returns at once without building, so a re-cut costs at
most the builds already running (``DataLoader`` drains what was in flight when
it is iterated again). Until every worker is up (spawn and import torch: 1-3 s,
more on a busy box) the loop builds inline and never waits on them.

Signals from the terminal. Ctrl-C and a hang-up go to the terminal's whole foreground process group, the
workers included. What they mean is the trainer's to decide (engine.app.signals: checkpoint and stop, or
train on); a worker that took them itself died, with a ``KeyboardInterrupt`` traceback from the middle of
``import torch`` when it was still starting, and the trainer then failed the run ("DataLoader worker exited
unexpectedly", exit 1) instead of checkpointing it (exit 130). So the workers are spawned with SIGINT and
SIGHUP blocked (``_terminal_signals_blocked``): a blocked signal stays blocked across fork and exec, and
Python leaves the mask as it finds it, so a worker never receives them. The trainer's thread blocks them
only for the few milliseconds of the spawn; one arriving then is held and delivered as the block ends (this
is how multiprocessing starts its own resource tracker). A worker still ends with its trainer (DataLoader's
shutdown, ``_exit_with_parent``).

A worker's exit. At shutdown DataLoader tells a worker to stop while its
queue's feeder thread (multiprocessing's ``QueueFeederThread``, a daemon) may
still be pickling a batch it built ahead: pickling moves the tensors' storage
into shared memory in C++ with the GIL released. The worker's loop returns,
the interpreter finalizes, and a daemon thread that asks for the GIL then is
ended with ``pthread_exit``, whose forced unwind through that C++ frame calls
``std::terminate``: "terminate called without an active exception" in
engine.log, a SIGABRT and a core, on about every graceful abort of a run with
workers. So each worker joins its feeder threads at exit (``finish_sends``,
an ``atexit`` hook: it runs before finalization, while threads may still take
the GIL), bounded so a feeder blocked on a full pipe cannot hold the exit up.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections import deque
from typing import Any, Callable, Iterable, Iterator

from torch.utils.data import DataLoader, Dataset, Sampler, get_worker_info

#: Signals a terminal sends its whole foreground process group, which the workers never receive (module docstring).
TERMINAL_SIGNALS = frozenset({signal.SIGINT, signal.SIGHUP})
#: Longest a worker's exit waits for its queue feeder to finish the batch it is sending (s); DataLoader waits
#: 5 s for a worker to exit before it terminates it.
FEEDER_JOIN_S = 2.0


def build_batch(task, key: tuple) -> dict:
    """The training batch of ``key`` = (sample indices, the step its masks are drawn for), on the host."""
    indices, step = key
    return task.make_batch(list(indices), step, train=True)


class TaskBatches(Dataset):
    """Item ``(generation, key)`` is ``(key, batch)``; ``(key, None)`` when the generation is no longer current."""

    def __init__(self, config_json: dict, task_state: dict | None, workers: int, context) -> None:
        """``config_json``/``task_state``: what a worker rebuilds its task from; ``context``: the spawn context
        the shared counters live in (handed to workers as they start)."""
        self._args = (config_json, task_state)
        self.trainer_pid = os.getpid()
        #: The current generation (bumped by every re-cut), and a flag per worker set once its task is built.
        #: Raw shared memory, no locks: a lock is a named semaphore the resource tracker reports as leaked when
        #: the engine ends by os._exit (a signal's fast exit), and each value has one writer anyway.
        self.generation = context.Value("q", 0, lock=False)
        self.ready = context.RawArray("b", workers)
        self.workers = workers
        #: Set when the trainer's stdio is not a terminal it may share (the in-process dashboard's): each worker
        #: then sends its fds 1 and 2 to os.devnull.
        self.silent = False
        self._task = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_task": None}

    def open(self, worker_id: int) -> None:
        """In worker ``worker_id``: rebuild the task, then flag this worker ready."""
        if os.getppid() != self.trainer_pid:
            os._exit(0)  # the trainer died while this worker was starting: init is not its trainer
        _exit_with_parent(self.trainer_pid)
        atexit.register(finish_sends)
        quiet_abandoned_handoffs()
        if self.silent:
            _silence_stdio()
        from engine.core import config as cfg
        from engine.core.registry import make_task
        from engine.training.allocator import keep_freed_memory

        keep_freed_memory()  # its batch arrays churn like the trainer's step (engine.training.allocator)

        config_json, task_state = self._args
        task = make_task(cfg.validate(config_json, "data worker"))
        task.setup(task_state)
        self._task = task
        self.ready[worker_id] = 1

    def __getitem__(self, ticket: tuple[int, tuple]) -> tuple[tuple, Any]:
        generation, key = ticket
        if generation != self.generation.value:
            return key, None  # cut since it was handed out: nobody will take it
        return key, build_batch(self._task, key)


def _open_worker(worker_id: int) -> None:
    get_worker_info().dataset.open(worker_id)


def _as_is(item):
    return item


def _has_descriptor(stream) -> bool:
    try:
        return stream is not None and stream.fileno() >= 0
    except (AttributeError, ValueError, OSError):
        return False


@contextlib.contextmanager
def _stdio_for_spawn():
    """Yields whether stdio had to be replaced: ``sys.stdout``/``sys.stderr`` point at ``os.devnull`` inside when
    either has no file descriptor (the module docstring says why), and are put back after."""
    if _has_descriptor(sys.stdout) and _has_descriptor(sys.stderr):
        yield False
        return
    saved = sys.stdout, sys.stderr
    with open(os.devnull, "w") as devnull:
        sys.stdout = sys.stderr = devnull
        try:
            yield True
        finally:
            sys.stdout, sys.stderr = saved


@contextlib.contextmanager
def _terminal_signals_blocked():
    """TERMINAL_SIGNALS blocked in this thread inside (what a process spawned here inherits), restored after.

    multiprocessing's resource tracker is started first: starting it (on the first spawn) blocks SIGINT around
    its own spawn and then *unblocks* it rather than restoring the mask, which let SIGINT through to every worker
    spawned after it."""
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, TERMINAL_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _silence_stdio() -> None:
    """In a worker: fds 1 and 2 to os.devnull (they were the dashboard's terminal)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)


def finish_sends(timeout: float = FEEDER_JOIN_S) -> None:
    """At a worker's exit: join multiprocessing's queue feeder threads, so none is inside torch's C++ storage
    sharing when the interpreter finalizes (the module docstring says why). DataLoader closed the queue by
    then, so a feeder ends once what it holds is sent; ``timeout`` bounds the wait for one blocked on a full
    pipe (blocked in a plain write, it holds no C++ frame and is harmless)."""
    deadline = time.monotonic() + timeout
    for thread in threading.enumerate():
        if thread.name == "QueueFeederThread" and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))


def quiet_abandoned_handoffs() -> None:
    """In a worker: a handoff its trainer abandoned is not reported here. A batch's storage reaches the trainer as
    a file descriptor that multiprocessing's resource sharer (a thread of this worker) hands over when the trainer
    asks for it; a trainer that stops in the middle of asking (a Ctrl-C landing in the handoff, its exit) leaves
    that thread writing to a closed socket, and the sharer prints the BrokenPipeError through ``sys.excepthook``
    into the stderr it shares with the trainer: a traceback after a clean exit (five Ctrl-Cs 50 ms apart). The
    trainer's side of a handoff it abandoned is the trainer's to report; a peer gone (ConnectionError, EOFError)
    inside the sharer is dropped here, and anything else is printed as before."""
    from multiprocessing import resource_sharer

    sharer, default = resource_sharer.__file__, sys.excepthook

    def hook(kind, value, tb) -> None:
        inside = any(frame.f_code.co_filename == sharer for frame, _ in traceback.walk_tb(tb))
        if not (inside and issubclass(kind, (ConnectionError, EOFError))):
            default(kind, value, tb)

    sys.excepthook = hook


def _exit_with_parent(parent: int) -> None:
    """A daemon thread ending this worker within a second of its trainer's death (a SIGKILLed engine leaves no
    orphans; DataLoader's own watchdog checks only every 5 s, and only once the worker is up)."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


class KeySampler(Sampler):
    """The loop's batch keys in reading order, from the last cut on; hands out ``(generation, key)`` tickets."""

    def __init__(self, generation) -> None:
        self._generation = generation
        self._keys: Iterator[tuple] = iter(())
        #: Tickets handed to the loader and not yet taken, oldest first.
        self.issued: deque[tuple[int, tuple]] = deque()

    def cut(self, keys: Iterable[tuple]) -> None:
        """Continue from ``keys`` (the loop's upcoming keys); every ticket handed out before is void."""
        self.stale()
        self._keys = iter(keys)
        self.issued.clear()

    def stale(self) -> None:
        """Void the tickets handed out so far (a worker skips them) without choosing new keys yet."""
        self._generation.value += 1

    def __iter__(self) -> Iterator[tuple[int, tuple]]:
        for key in self._keys:
            ticket = (self._generation.value, key)
            self.issued.append(ticket)
            yield ticket


class WorkerBatches:
    """A batch source over a DataLoader with ``workers`` spawned worker processes (see the module docstring).

    The loop's interface: ``take(key)``, ``ahead(upcoming)``, ``depth``, ``hits``/``misses``, ``close``.
    """

    def __init__(self, build: Callable[[tuple], Any], workers: int, worker_args: tuple, pin_memory: bool = False,
                 per_worker: int = 2, wait: bool = False) -> None:
        """``build(key)`` builds inline (misses, and while workers start); ``worker_args`` = (config as JSON,
        task state); ``per_worker`` batches are kept ahead by each worker (DataLoader's ``prefetch_factor``);
        ``wait``: the loop waits for the workers to come up instead of building inline meanwhile (workers asked
        for before the first step: ``runtime.data_workers``; a worker that cannot build its task then raises)."""
        import torch

        context = multiprocessing.get_context("spawn")
        self.build = build
        self.workers = workers
        self.depth = workers * per_worker
        self.dataset = TaskBatches(*worker_args, workers=workers, context=context)
        self.sampler = KeySampler(self.dataset.generation)
        self.loader = DataLoader(self.dataset, batch_size=None, sampler=self.sampler, num_workers=workers,
                                 collate_fn=_as_is, pin_memory=pin_memory, worker_init_fn=_open_worker,
                                 multiprocessing_context=context, persistent_workers=True,
                                 prefetch_factor=per_worker, generator=torch.Generator())
        self.wait = wait
        self._iter = None
        self._recut = True  # the sampler does not follow the loop yet
        self.hits = 0
        self.misses = 0

    @property
    def ready(self) -> bool:
        """Every worker has its task built."""
        return all(self.dataset.ready)

    def take(self, key: tuple) -> Any:
        """``key``'s batch: the loader's next one when it is ``key``'s, else built here (and the sampler re-cut)."""
        issued = self.sampler.issued
        if not self._recut and issued and issued[0][1] == key and (self.wait or self.ready):
            issued.popleft()
            got, batch = next(self._iter)
            if got == key and batch is not None:
                self.hits += 1
                return batch
        self.misses += 1
        self._recut = True
        if issued:  # what was handed out is behind the loop now: workers skip it (and it is drained at the re-cut)
            self.sampler.stale()
            issued.clear()
        return self.build(key)

    def ahead(self, upcoming: Callable[[], Iterable[tuple]]) -> None:
        """Start the workers (first call), or re-cut the sampler at ``upcoming()`` once they are all up."""
        if self._iter is None:
            self.sampler.cut(upcoming())
            with _stdio_for_spawn() as replaced, _terminal_signals_blocked():
                self.dataset.silent = replaced  # pickled into each worker as it spawns
                self._iter = iter(self.loader)  # spawns the workers: RuntimeError / OSError / ValueError if it cannot
            self._recut = False
            return
        if self._recut and self.ready:
            self.sampler.cut(upcoming())
            self._iter = iter(self.loader)  # persistent workers: drains what was in flight (void: skipped), re-primes
            self._recut = False

    def close(self, wait: bool = True) -> None:
        """Stop the workers now (one still starting, or any when not ``wait``, a stop's: terminated rather than
        waited for; a worker building a batch reads DataLoader's shutdown message only once it is built).

        The workers' pids leave torch's SIGCHLD watch first, whatever their state: DataLoader removes them only
        after joining, so a worker that dies on its way out raised "DataLoader worker (pid …) is killed by
        signal" in the training thread and turned a finished or aborted run into a failed one. Seen in CI: a
        graceful abort at step 21, a worker's C++ runtime aborting at exit ("terminate called without an active
        exception"). Every batch the run needs is taken by then, so how a worker ends no longer matters.
        """
        it, self._iter = self._iter, None
        if it is None:
            return
        if getattr(it, "_worker_pids_set", False):
            from torch.utils.data._utils import signal_handling

            signal_handling._remove_worker_pids(id(it))
            it._worker_pids_set = False
        if not self.ready or not wait:
            # A worker importing torch reads no shutdown message for seconds: DataLoader would wait 5 s for each.
            for process in getattr(it, "_workers", ()):
                process.terminate()
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        self.loader = None
