"""Sinks served by a thread of their own, so the training thread only queues an event.

At a thousand steps a second the training thread cannot afford to encode and
write every step event itself. Measured inside the loop, the log file and the
console took ~45 µs a step: ten times what the same calls cost in a
micro-benchmark, because the step's tensors have pushed their code and data
out of the core's caches by the time they run. Handed to a thread that drains
a queue every ``interval`` seconds, the same work runs as one warm batch, on
the other core while the training thread is inside torch (whose kernels
release the GIL), and the training thread pays for one ``deque.append``.

Nothing about what reaches the sinks changes:

- **Order.** One queue, drained by whoever holds the lock, so each sink sees
  every event in the order it was emitted, from any thread.
- **Write-through.** An event a viewer must not wait for (``urgent``: an
  evaluation, a checkpoint, a state change, an ack) drains the queue on the
  emitting thread before ``emit`` returns, as the log file's own write-through
  did: when the checkpoint event is emitted, it and every step before it are
  on disk.
- **Bounded.** A queue longer than ``max_queue`` events is drained on the
  emitting thread too, so a starved drainer costs speed, never memory.
- **Isolation.** A sink that raises is dropped with a message, as on the bus.
- **Batches.** A sink with a ``drained`` method hears it after each pass (the step
  record writes a pass's rows as one batch then, engine.run.steps.sink).
- **Ends.** ``flush`` and ``close`` drain first; what a SIGKILL loses is what
  the log file's one-second buffer already risked, plus at most ``interval``.

The step record is one of these sinks (``run_records``): every step event goes into
``<run>/steps/`` from this thread, never from the training thread.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable, Iterable

from engine.run import events as ev
from engine.run.rundir import RunDir, StatusWriter
from engine.run.sinks import URGENT, EventBus, status_sink
from engine.run.steps import record_dir
from engine.run.steps.sink import RecordSink

#: Seconds between the drainer's passes: a viewer sees a step event at most this much later.
DRAIN_INTERVAL_S = 0.2
#: Events queued before the emitting thread drains them itself.
MAX_QUEUE = 4096


class OffThreadSinks:
    """One sink that forwards every event, in order, to ``sinks`` on a drainer thread (module docstring)."""

    def __init__(self, sinks: Iterable[Callable], interval: float = DRAIN_INTERVAL_S,
                 urgent: Iterable[str] = URGENT, max_queue: int = MAX_QUEUE) -> None:
        self.sinks = [sink for sink in sinks if sink is not None]
        self._bus = EventBus(self.sinks)  # its per-sink isolation: a failing sink is detached, the rest go on
        self._batched = [sink.drained for sink in self.sinks if callable(getattr(sink, "drained", None))]
        self._urgent = frozenset(urgent)
        self._max_queue = max_queue
        self._interval = interval
        self._queue: deque = deque()
        self._lock = threading.RLock()
        self._draining = False  # set while this object delivers: an event a sink emits meanwhile only queues
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "OffThreadSinks":
        """Start the drainer thread (until then every event is delivered at once)."""
        self._thread = threading.Thread(target=self._run, name="event-drainer", daemon=True)
        self._thread.start()
        return self

    def __call__(self, event) -> None:
        self._queue.append(event)
        if self._thread is None or event.type in self._urgent or len(self._queue) >= self._max_queue:
            self.drain()

    def drain(self) -> None:
        """Deliver every queued event now, on this thread, in order."""
        with self._lock:
            if self._draining:  # a sink's own emit (a write warning): the loop below delivers it next
                return
            self._draining = True
            try:
                delivered = bool(self._queue)
                while self._queue:
                    self._bus.emit(self._queue.popleft())
                if delivered:
                    for drained in self._batched:
                        drained()
            finally:
                self._draining = False

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.drain()

    def flush(self) -> None:
        """Deliver what is queued, then flush every sink that can (the heartbeat calls this every second)."""
        self.drain()
        for sink in self.sinks:
            flush = getattr(sink, "flush", None)
            if callable(flush):
                flush()

    def close(self) -> None:
        """Stop the drainer, deliver what is left and close every sink that can be closed."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None
        self.drain()
        self._bus.close()


def run_records(run_dir: RunDir, jsonl: Callable, console: Callable | None = None
                ) -> tuple[StatusWriter, OffThreadSinks]:
    """A run directory's records behind one drainer: the log (``jsonl``), the step record (``steps/``),
    status.json's fields, the console; and the status writer, whose heartbeat (started by the caller) flushes
    the drainer every second. The engine, the three integrations and a job's rank 0 all come through here, so
    they all write the same record. A step record that cannot be opened is a warning in the log, never a
    stopped run: the steps then live in events.jsonl alone, every one of them (the log's step cadence is off).
    An old run being resumed has its log's steps converted into the record first (``_adopt_old_steps``)."""
    status = StatusWriter(run_dir)
    warn = getattr(jsonl, "warn", None)
    try:
        _adopt_old_steps(run_dir, [jsonl, console])
        record = RecordSink(record_dir(run_dir.root), warn=lambda text: warn(text) if warn else None)
    except OSError as exc:
        record = None
        if hasattr(jsonl, "step_every_s"):
            jsonl.step_every_s = 0.0
        if warn is not None:
            warn(f"{record_dir(run_dir.root)}: cannot open the step record ({exc.strerror or exc})")
    records = OffThreadSinks([jsonl, record, status_sink(status), console]).start()
    status.on_beat = records.flush
    return status, records


def _adopt_old_steps(run_dir: RunDir, sinks: list[Callable | None]) -> None:
    """A run written before the step record (its log holds every step) gets them in ``steps/`` before the first
    new row (engine.run.steps.convert.adopt), so a viewer reads one record, not the resumed steps alone; the
    sinks (the log, the console) are told what was converted."""
    from engine.run.steps.convert import adopt

    started = time.monotonic()
    rows = adopt(run_dir.root)
    if rows:
        note = ev.Warning(text=f"{record_dir(run_dir.root)}: the run's {rows} earlier steps converted from "
                               f"events.jsonl into its step record ({time.monotonic() - started:.1f}s)")
        for sink in sinks:
            if sink is not None:
                sink(note)
