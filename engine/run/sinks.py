"""Where events go: an EventBus fanning out to sinks (memory, events.jsonl, headless console).

The bus is called from the training thread; sinks must be cheap, and the
ones that encode or write (the log, the status record, the console) sit behind
engine.run.offthread in a run. The JSONL sink buffers and flushes at least
once a second and at once for events a viewer must not wait for (evals,
checkpoints, state changes, acks). Torch-free.
"""

from __future__ import annotations

import io
import os
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable, Iterable, TextIO

from engine.core.fmt import format_mfu, number, printable
from engine.core.safe_files import open_for_write
from engine.core.taskspec import Capabilities
from engine.run import autotune_events
from engine.run import events as ev
from engine.run.pace import Pace, Rates, of_event, per_step

#: Seconds between two step lines in events.jsonl (JsonlSink's default cadence; 0: every step's line). Every step
#: is in the step record (``steps/``), which the viewers and your tools read; a line a second (and the first, last
#: and skipped steps) keeps grep, jq and tail -f useful: ~30 MB a day of step lines at any speed, ~30 GB at 1,000
#: steps/s for every line (clock samples add theirs: docs/STEP_RECORD.md). No record: every line (offthread).
STEP_LINE_S = 1.0
#: Event types written through to disk immediately (everything else within a second).
URGENT = {"schema", "run_started", "eval", "checkpoint", "checkpoint_failed", "export", "state", "setting",
          "refused", "warning", "run_finished"}


class EventBus:
    """Fan events out to every sink; a failing sink is dropped with a message, never kills the run."""

    def __init__(self, sinks: Iterable[Callable[[ev.Event], None]] = ()) -> None:
        #: A tuple replaced whole on every change (copy on write): ``emit``, once a step, reads it without a lock.
        self._sinks: tuple = tuple(sinks)
        self._lock = threading.Lock()

    def add(self, sink: Callable[[ev.Event], None]) -> None:
        """Attach another sink (e.g. the control server's ack matcher)."""
        with self._lock:
            self._sinks = (*self._sinks, sink)

    def emit(self, event: ev.Event) -> None:
        """Deliver one event to every sink, in order."""
        for sink in self._sinks:
            try:
                sink(event)
            except Exception as exc:  # a broken viewer must not stop training
                with self._lock:
                    self._sinks = tuple(s for s in self._sinks if s is not sink)
                print(f"sensorlm-tui: event sink {sink!r} failed and was detached: {exc}", file=sys.stderr)

    def close(self) -> None:
        """Close every sink that has a close()."""
        for sink in self._sinks:
            close = getattr(sink, "close", None)
            if close:
                close()


class MemorySink:
    """Keeps events in a bounded deque for an in-process viewer; ``drain`` takes them all."""

    def __init__(self, maxlen: int = 1_000_000) -> None:
        self._events: deque[ev.Event] = deque(maxlen=maxlen)
        self._ready = threading.Event()

    def __call__(self, event: ev.Event) -> None:
        self._events.append(event)
        self._ready.set()

    def drain(self, timeout: float | None = None) -> list[ev.Event]:
        """Events since the last drain, waiting up to ``timeout`` s for the first one."""
        if timeout and not self._events:
            self._ready.wait(timeout)
        self._ready.clear()
        out = []
        while self._events:
            out.append(self._events.popleft())
        return out


class JsonlSink:
    """Append-only events.jsonl writer; the first record is the schema version.

    A full disk (or any failing write) never detaches it: lines it could not write stay in memory, in
    order, up to ``max_backlog`` bytes, and every later event or heartbeat retries (at most once a
    ``retry_interval``). ``warn`` (set by the engine to emit a Warning) is told once when writing starts to
    fail and once when it recovers. It writes through a raw O_APPEND descriptor rather than a buffered
    file because a buffered writer that hit ENOSPC has lost track of how much of its buffer reached the
    disk; ``os.write`` returns the bytes written, so a retry continues exactly where the disk stopped.
    Past the bound, step events are dropped (and counted in the recovery warning); everything else
    (evals, checkpoints, state changes, run_finished) is always kept: there are few of them.

    Step lines at a cadence: with ``step_every_s`` > 0 a step event gets a line when that many seconds (of
    its own time) have passed since the last step line, and always when it is the run's first or last
    step or a skipped one; ``grep``, ``jq`` and ``tail -f`` see the run's progress at a bounded size, and the
    step record (engine.run.steps) holds every step.
    """

    def __init__(self, path: Path, flush_interval: float = 1.0, *, max_backlog: int = 64 << 20,
                 retry_interval: float = 1.0, warn: Callable[[str], None] | None = None,
                 step_every_s: float | None = None) -> None:
        self.path = Path(path)
        self.step_every_s = STEP_LINE_S if step_every_s is None else step_every_s
        self._step_line_t = float("-inf")  # the time of the last step line written
        self._total_steps = 0
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        self._fd: int | None = open_for_write(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)  # no link
        self._lock = threading.Lock()
        self._interval = flush_interval
        self._retry = retry_interval
        self._max_backlog = max_backlog
        #: Called (outside the sink's lock) with a one-line warning when writing fails and when it recovers.
        self.warn = warn
        self._pending: deque[bytes] = deque()
        self._pending_bytes = 0
        self._failing: str | None = None  # the error while the disk refuses our writes
        self._failed_at = 0.0
        self._late = self._dropped = 0
        self._last_flush = time.monotonic()
        if not fresh:
            # A resumed run appends; a torn last line from a crash gets its own line ending.
            with open(self.path, "rb") as handle:
                handle.seek(max(0, self.path.stat().st_size - 1))
                if handle.read(1) != b"\n":
                    self._pending.append(b"\n")
                    self._pending_bytes += 1
        self(ev.Schema())

    def _step_line_due(self, event: ev.StepLogged) -> bool:
        """Whether a step event gets a line at the cadence (the class docstring)."""
        if event.skipped or event.step == self._total_steps or event.t - self._step_line_t >= self.step_every_s:
            self._step_line_t = event.t
            return True
        return False

    @property
    def backlog(self) -> int:
        """Bytes accepted but not yet on disk."""
        return self._pending_bytes

    def __call__(self, event: ev.Event) -> None:
        if event.type == "step" and self.step_every_s > 0 and not self._step_line_due(event):
            return
        if event.type == "run_started":
            self._total_steps = event.total_steps
        line = (ev.to_json(event) + "\n").encode()
        with self._lock:
            if self._fd is None:
                return
            if event.type == "step" and self._pending_bytes + len(line) > self._max_backlog:
                self._dropped += 1
            else:
                self._pending.append(line)
                self._pending_bytes += len(line)
                if self._failing:
                    self._late += 1
            now = time.monotonic()
            due = event.type in URGENT or now - self._last_flush >= self._interval
            if due and (not self._failing or now - self._failed_at >= self._retry):
                note = self._write_locked()
            else:
                note = None
        self._tell(note)

    def flush(self) -> None:
        """Push pending lines to the OS (called by the heartbeat thread every second; retries a full disk)."""
        with self._lock:
            note = self._write_locked() if self._fd is not None else None
        self._tell(note)

    def _write_locked(self) -> str | None:
        """Write every pending line; returns a warning to emit when failing starts or stops."""
        self._last_flush = time.monotonic()
        if not self._pending:
            data = b""
        else:  # one write for the lot (a second of step events is one syscall, not hundreds)
            data = b"".join(self._pending) if len(self._pending) > 1 else self._pending[0]
            self._pending.clear()
        done = 0
        try:
            while done < len(data):
                done += os.write(self._fd, memoryview(data)[done:])
        except OSError as exc:
            self._pending.appendleft(data[done:])  # what the disk did not take, from the exact byte
            self._pending_bytes = sum(map(len, self._pending))
            self._failed_at = time.monotonic()
            if self._failing is None:
                self._failing = exc.strerror or str(exc)
                return (f"{self.path}: cannot write events ({self._failing}); keeping them in memory "
                        f"(up to {_human_bytes(self._max_backlog)}) and retrying every {self._retry:g} s")
            return None
        self._pending_bytes = 0
        if self._failing is not None:
            error, self._failing = self._failing, None
            lost = f"; {self._dropped} step events over the {_human_bytes(self._max_backlog)} backlog were " \
                "dropped" if self._dropped else ""
            note = f"{self.path}: writable again after '{error}'; {self._late} events written late{lost}"
            self._late = self._dropped = 0
            return note
        return None

    def _tell(self, note: str | None) -> None:
        if note and self.warn is not None:
            self.warn(note)

    def close(self, retry_for: float = 10.0) -> None:
        """Write what is pending (retrying a full disk for up to ``retry_for`` s), fsync and close."""
        deadline = time.monotonic() + retry_for
        while True:
            with self._lock:
                if self._fd is None:
                    return
                self._write_locked()
                if not self._pending or time.monotonic() >= deadline:
                    try:
                        os.fsync(self._fd)
                    except OSError:
                        pass
                    os.close(self._fd)
                    self._fd = None
                    return
            time.sleep(min(self._retry, 0.2))


def _fmt(value: float | None, spec: str = ".4f") -> str:
    return "-" if value is None else format(value, spec)


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return f"{n} B"


def clock(seconds: float) -> str:
    """A duration as M:SS or H:MM:SS (the headless lines' ``elapsed`` and ``eta`` fields)."""
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class ConsoleSink:
    """Plain greppable lines for headless runs: no carriage returns, colour only on a TTY without NO_COLOR.

    Every line is ``<tag> <text> elapsed M:SS [eta M:SS] at HH:MM:SS``: the tag first (``grep ^step``),
    the clock last as ``key value`` fields. ``elapsed`` counts from the run_started event (this engine
    of a resumed run); ``at`` is the event's local wall-clock time (the start line also gives the date);
    printed step lines carry ``eta`` at the rate over the last ``RATE_WINDOW`` step events, so the first
    step's warm-up and an eval pause fade out of it instead of skewing it for the whole run. The line's
    steps/s, samples/s and tokens/s are that same window's (engine.run.pace), so they agree with each other
    and with the ETA; a resume, a pause or a batch change starts a new window.
    """

    #: Step events the ETA's rate is measured over.
    RATE_WINDOW = 64

    def __init__(self, stream: TextIO | None = None, print_every: int = 10, total_steps: int = 0) -> None:
        self.stream = stream or sys.stdout
        self.print_every = max(1, print_every)
        self.total = total_steps
        isatty = getattr(self.stream, "isatty", lambda: False)()
        self.colour = isatty and "NO_COLOR" not in os.environ
        self._start_t: float | None = None
        self._pace = Pace(self.RATE_WINDOW)
        self._event: ev.Event | None = None  # the event being printed: its time stamps the line

    def count_from(self, t: float) -> None:
        """``elapsed`` counts from ``t`` (the first start-up phase, told before this sink existed) until the run
        starts."""
        self._start_t = t

    def _rates(self, event: ev.StepLogged) -> Rates:
        """The recent window's pace; the step's own before the window has two steps."""
        found = self._pace.rates()
        if found is not None:
            return found
        samples, tokens = per_step(event.samples_per_s, event.steps_per_s, event.tokens_per_s, event.batch_size)
        rate = event.steps_per_s
        return Rates(rate, samples * rate if samples is not None else None, tokens * rate if tokens is not None
                     else None)

    def _eta(self, event: ev.StepLogged) -> str:
        """Time left at the recent rate ("?" without a total or a rate yet)."""
        rate = self._rates(event).steps_per_s
        return clock((self.total - event.step) / rate) if self.total and rate > 0 else "?"

    def _clock_fields(self, event: ev.Event) -> str:
        if self._start_t is None or event.type == "run_started":
            self._start_t = event.t
        fields = f" elapsed {clock(event.t - self._start_t)}"
        if event.type == "step" and not event.skipped:
            fields += f" eta {self._eta(event)}"
        when = time.localtime(event.t)
        date = time.strftime(" on %Y-%m-%d", when) if event.type == "run_started" else ""
        return f"{fields} at {time.strftime('%H:%M:%S', when)}{date}"

    def _out(self, tag: str, text: str, colour: str = "") -> None:
        text = printable(text)  # a name, a path, a task's warning: never a terminal escape or a second line
        if self.colour and colour:
            tag = f"\x1b[{colour}m{tag}\x1b[0m"
        clock = self._clock_fields(self._event) if self._event is not None else ""
        try:
            self.stream.write(f"{tag} {text}{clock}\n")
            self.stream.flush()
        except (OSError, ValueError):  # terminal gone (SIGHUP): events.jsonl still has everything
            pass

    def __call__(self, event: ev.Event) -> None:
        kind = event.type
        self._event = event
        if kind == "step":
            self._pace.extend([of_event(event)])
        elif kind == "run_started" or (kind == "state" and event.state == "running") or \
                (kind == "setting" and event.name in ("batch_size", "grad_accum")):
            self._pace.forget_before(event.t)  # a new engine, the end of a pause, a new batch: a new pace
        if kind == "run_started":
            self.total = event.total_steps
            self.primary = Capabilities.from_dict(event.capabilities).primary
            start = f" resumed from {event.resumed_from} at step {event.start_step}" if event.resumed_from else ""
            self._out("start", f"run {event.name} task {event.task} preset {event.preset} "
                      f"params {event.params:,}{model_summary(event)} device {event.device_name}{start}", "1")
        elif kind == "step":
            if event.skipped:
                self._out("skip ", f"step {event.step} non-finite loss/grad; optimizer step skipped", "33")
            elif event.step % self.print_every == 0 or event.step == self.total:
                self._out("step ", f"{event.step:>7}/{self.total} epoch {event.epoch} loss {event.loss:.5f} "
                          f"lr {event.lr:.2e} gnorm {_fmt(event.grad_norm, '.3f')} "
                          f"{_throughput(self._rates(event), event)}")
        elif kind == "eval":
            primary = getattr(self, "primary", None)
            unit = f" {primary.unit}" if primary is not None and primary.name == event.primary and primary.unit else ""
            value = event.metrics.get(event.primary)
            main = f" {event.primary} {value:.4g}{unit}" if event.primary != "val_loss" and \
                isinstance(value, (int, float)) else ""
            extra = " ".join(f"{k} {v:.4f}" for k, v in sorted(event.metrics.items())
                             if k not in ("val_loss", event.primary) and isinstance(v, (int, float)))
            best = f" best {event.best:.4g}" if event.best is not None else ""
            self._out("eval ", f"step {event.step} val_loss {event.val_loss:.5f}{main}{best}"
                      f"{' *' if event.is_best else ''} {extra}".rstrip(), "36")
        elif kind == "checkpoint":
            self._out("ckpt ", f"step {event.step} {event.kind} {event.path} {_human_bytes(event.bytes)} "
                      f"{event.seconds:.2f} s", "32")
        elif kind == "export":
            self._out("exprt", f"step {event.step} {event.kind} {event.path} {event.seconds:.2f} s", "32")
        elif kind == "checkpoint_failed":
            self._out("ckpt!", f"step {event.step} save failed, previous checkpoint kept: {event.error}", "31")
        elif kind == "state":
            if event.state == "checkpointing" or event.reason == "checkpoint written":
                return  # the ckpt line already says it; these transitions are for live viewers
            self._out("state", f"{event.state} {event.reason}".rstrip(), "35")
        elif kind == "setting":
            self._out("set  ", f"{event.name} {event.old} -> {event.new} {event.reason}".rstrip(), "34")
        elif kind == "refused":
            self._out("refus", f"{event.request} {event.why}", "31")
        elif kind == "warning":
            self._out("warn ", event.text, "33")
        elif kind == "phase":  # start-up, told as each phase begins (engine.app.startup)
            self._out("phase", event.phase + (f" ({event.detail})" if event.detail else ""), "2")
        elif kind.startswith("autotune"):
            self._unit = getattr(event, "unit", getattr(self, "_unit", "samples/s"))
            self._out("tune ", autotune_events.line(event, self._unit), "34")
        elif kind == "compile":
            what = "compiled" if event.first else f"recompiled ({'; '.join(event.reasons) or 'no reason given'})"
            self._out("compl", f"step {event.step} {what}: {event.frames} function(s) in {event.seconds:.1f} s "
                      f"({event.mode}, {event.backend}; {event.total_recompiles} recompiles so far)", "34")
        elif kind == "log" and event.stream == "engine":  # the engine's own notes (the thread plan)
            self._out("note ", event.text)
        elif kind == "run_finished":
            line = f"{event.status} at step {event.steps} {event.reason}".rstrip()
            if event.best is not None:
                line += f" best {event.best:.4g}"
            if event.checkpoint:
                line += f" {event.checkpoint_said()}"
            if event.export:
                line += f" export {event.export}"
            self._out("done ", line, "1")
            if event.resume_command:
                self._event = None  # no clock fields: the line stays a command to copy
                self._out("done ", f"resume with: {event.resume_command}")


def model_summary(event: ev.RunStarted) -> str:
    """" trainable 1,024 precision bf16 data 10,000/64" (what a run of an older release reported: less)."""
    parts = [f" trainable {event.trainable:,}"] if event.trainable else []
    # the engine's [runtime]; an integration's free-form [train] (Lightning's precision)
    precision = (event.config.get("runtime") or event.config.get("train") or {}).get("precision")
    if precision:
        parts.append(f" precision {precision}")
    if event.train_samples:
        parts.append(f" data {event.train_samples:,} train / {event.val_samples:,} val samples")
    return "".join(parts)


def _throughput(rates: Rates, event: ev.StepLogged) -> str:
    """"14.5 steps/s 464 samples/s" (" 59,392 tok/s MFU 41.2 %" after it for a task that counts tokens; no
    samples/s where the run does not count them): one window's numbers. MFU is the step's, scaled to the
    window's tokens/s ("–" where it is unknown)."""
    text = f"{number(rates.steps_per_s)} steps/s"
    if rates.samples_per_s is not None:
        text += f" {number(rates.samples_per_s)} samples/s"
    if rates.tokens_per_s is not None:
        mfu = event.mfu * rates.tokens_per_s / event.tokens_per_s if event.tokens_per_s else 0.0
        text += f" {number(rates.tokens_per_s)} tok/s MFU {format_mfu(mfu)}"
    return text


class LineCapture(io.TextIOBase):
    """A text stream that turns whatever training code prints into LogLine events (one per line)."""

    def __init__(self, bus: EventBus, stream: str) -> None:
        self._bus = bus
        self._stream = stream
        self._pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._pending += text
        while "\n" in self._pending:
            line, self._pending = self._pending.split("\n", 1)
            self._bus.emit(ev.LogLine(text=line[:2000], stream=self._stream))
        return len(text)


def status_sink(status) -> Callable[[ev.Event], None]:
    """The sink that keeps status.json's state, step, best and last checkpoint current (``status``: a
    engine.run.rundir.StatusWriter): what `runs` lists without reading the log."""
    def sink(event) -> None:
        if event.type == "state":
            status.update(state=event.state, step=event.step)
        elif event.type == "run_started":
            status.update(total_steps=event.total_steps, step=event.start_step, state="running")
        elif event.type == "eval" and event.best is not None:
            status.update(best=event.best, best_metric=event.primary, last_eval_step=event.step)
        elif event.type == "checkpoint":
            status.update(last_checkpoint=event.path)
    return sink
