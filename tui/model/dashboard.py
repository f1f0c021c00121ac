"""What the dashboard knows about a run: events folded into plain state and numpy history.

The UI thread owns one ``RunModel``; batches of events from the session worker
are folded in with ``ingest``. Widgets never see events, only this model, and
each panel redraws only when its ``versions`` counter moved, which is what
keeps the bytes on the wire low. Torch- and Textual-free, so it is tested on
its own.
"""

from __future__ import annotations

import operator
import time
from collections import Counter, deque
from dataclasses import dataclass, replace
from typing import Any, Iterable

import numpy as np

from engine.run import events as ev
from engine.run.control.requests import SETTABLE
from tui.model import metrics as mx
from tui.model.ema import LEVELS, EmaState, ema_extend
from tui.model.format import human_bytes, short_float
from tui.model.history import Ring
from tui.model.history_fold import LOSS as _LOSS  # columns of the step ring
from tui.model.history_fold import STEP as _STEP
from tui.model.history_fold import STEP_FIELDS, HistoryFold, StepRings, known, latest_attempts, scalar_ring

#: States in which the engine no longer runs.
ENDED_STATES = ("finished", "aborted", "failed")
#: Liveness answers that mean the engine is gone.
ENDED_LIVENESS = ("finished", "aborted", "failed", "crashed")
#: Warm-up before an ETA is shown (Burn's rule: at least 10 steps and more than 10 s).
ETA_MIN_STEPS = 10
ETA_MIN_SECONDS = 10.0
#: SettingChanged names drawn as loss-plot markers: the settables plus OOM recovery's grad_accum.
#: ("state", "checkpoint", "reserved_bytes" acks are control replies, not training settings.)
MARKED_SETTINGS = tuple(SETTABLE) + ("grad_accum",)
#: RunFinished.status → the state it leaves the run in.
_FINAL_STATE = {"finished": "finished", "aborted": "aborted", "interrupted": "aborted", "failed": "failed"}

#: Seconds after its newest event a run's log counts as history (phase clocks stop at that event).
STALE_CLOCK_S = 3600.0
# Columns of the memory ring.
MEM_COLUMNS = ("step", "allocated", "reserved", "peak", "nvml_used", "predicted")


@dataclass(frozen=True)
class LogEntry:
    """One line for the log panel: ``kind`` picks its colour (eval, checkpoint, setting, refused, …)."""

    kind: str
    text: str
    step: int | None = None


@dataclass(frozen=True)
class Marker:
    """A setting change drawn as a vertical line on the loss plot."""

    step: int
    name: str
    old: Any
    new: Any


class RunModel:
    """Everything the panels draw, folded from events; ``versions[area]`` counts changes per panel."""

    def __init__(self, capacity: int = 1 << 20) -> None:
        self.capacity = capacity
        self.versions: Counter[str] = Counter()
        self.started: ev.RunStarted | None = None
        self.state = "starting"
        self.state_reason = ""
        self.liveness = "unknown"
        self.finished: ev.RunFinished | None = None
        #: RunStarted events seen: each (a fresh start or a resume) opens a new generation of the run.
        self.generation = 0
        #: The step the current generation resumed from (None for a fresh start).
        self.resumed_from_step: int | None = None
        self.last_step: ev.StepLogged | None = None
        self.steps = Ring(capacity, 2 + len(LEVELS) - 1)
        self._ema = [EmaState() for _ in LEVELS[1:]]
        self._rate: deque[tuple[float, int]] = deque(maxlen=256)  # (t, step) for steps/s and ETA
        self._first_step: tuple[float, int] | None = None
        self.evals: list[ev.EvalDone] = []
        #: The task's declared capabilities (primary metric, curves); the val_loss fallback until RunStarted.
        self.capabilities = mx.capabilities_of(None)
        #: Start-up phases reported before the first step (PhaseStarted), oldest first.
        self.phases: list[ev.PhaseStarted] = []
        self._stepped_since_phase = False
        #: Per-step scalars besides the loss, by name: rings of (step, value).
        self.scalars: dict[str, Ring] = {}
        self._pending_fold: HistoryFold | None = None  # a long history's steps still being folded (preview shown)
        self._preview_key: tuple | None = None
        self._val_names: list[str] = []
        #: Another run drawn behind this one's curves, aligned by step (a RunModel; None: no overlay).
        self.compare: RunModel | None = None
        self.memory = Ring(min(capacity, 1 << 16), len(MEM_COLUMNS))
        self.last_memory: ev.MemorySampled | None = None
        self.system: ev.SystemSampled | None = None
        #: The latest per-rank telemetry of a distributed run (None for one process).
        self.ranks: ev.RanksSampled | None = None
        self.markers: list[Marker] = []
        self.checkpoints: list[ev.CheckpointSaved] = []
        self.pending_log: list[LogEntry] = []
        self._acked: set[str] = set()
        self.last_t: float | None = None
        #: Viewer side: "connecting", "connected" or "failed: <why>".
        self.connection = "connecting"
        #: True when this viewer may not send controls.
        self.read_only = False

    # ------------------------------------------------------------------ ingest
    def ingest(self, batch: Iterable[ev.Event]) -> None:
        """Fold a batch of events in; consecutive step events are appended to the history in one go.

        A whole ``engine.run.history.store.History`` is folded from its columns, every step at once (``ingest_history``
        folds the newest steps only and leaves the rest to another thread).
        """
        if hasattr(batch, "column") and hasattr(batch, "others"):  # a whole engine.run.history.store.History
            fold = self.ingest_history(batch)
            if fold is not None:
                self.adopt(fold, fold.finish())
            return
        steps: list[ev.StepLogged] = []
        for event in batch:
            if isinstance(event, ev.StepLogged):
                steps.append(event)
                continue
            if steps:
                self._ingest_steps(steps)
                steps = []
            self._ingest_one(event)
        if steps:
            self._ingest_steps(steps)

    def ingest_ack(self, ack: ev.Event) -> None:
        """An ack returned by ``Session.send``: folded in unless the event stream already brought it."""
        self._ingest_one(ack)

    def ingest_history(self, history, fold: HistoryFold | None = None) -> HistoryFold | None:
        """A run's whole history, its steps from ``History.column``; returns the fold still to finish, or None.

        Why columns: building a StepLogged per log line and reading it back costs tens of µs a step on a
        loaded 2-core box — over half a minute for a 1M-step run on attach; the columns cost well under 1 µs
        a step. Why a preview: on a fresh model with more than ``PREVIEW_ROWS`` steps only the newest rows
        go into the rings now (tui.model.history_fold; what the first frame draws, exact); ``fold.finish()`` (any
        thread) and then ``adopt`` put every row in. ``fold`` is the History's fold when the caller made it
        already (the session worker does, off the UI thread). Same result as ``ingest(list(history))``
        (tested): no handler of the other events reads the step history, so folding them after the steps
        changes nothing.
        """
        step = history.column("step", "step")
        pending = None
        if len(step):
            last = next(history[i] for i in range(len(history) - 1, -1, -1) if history[i].type == "step")
            t = history.column("step", "t")
            recent = slice(-self._rate.maxlen, None)
            listed = getattr(history, "step_columns", lambda: [])()  # every component any step carried
            components = self._component_names(last) + [c.split(".", 1)[1] for c in listed
                                                        if c.startswith("components.")]
            names = list(STEP_FIELDS) + [f"components.{k}" for k in dict.fromkeys(components)]
            first = (float(t[0]), int(step[0]))
            rates = zip(t[recent].tolist(), step[recent].astype(np.int64).tolist())
            if len(self.steps) or self.scalars:  # steps already folded: append (and rewind) as a live batch does
                extra = {name.rpartition(".")[2]: history.column("step", name) for name in names}
                self._append_steps(step, history.column("step", "loss"), last, first, rates, extra)
            else:
                fold = fold or HistoryFold(history, self.capacity)
                self._install(fold.preview(names))
                self._stepped(last, first, rates)
                if fold.deferred:
                    pending = self._pending_fold = fold
                    self._preview_key = (id(self.steps), self.steps.total, self.steps.generation)
        # Samples (a memory and a system sample every ~100 steps: most of the other events) are folded in bulk:
        # the memory ring gets one append, and only the newest system / rank sample is kept anyway.
        others = history.others("step")
        latest = {}
        for event in others:
            if type(event) in _LATEST_ONLY:
                latest[type(event)] = event
            elif type(event) is not ev.MemorySampled:
                self._ingest_one(event)
        for event in latest.values():
            self._ingest_one(event)
        memory = [e for e in others if type(e) is ev.MemorySampled]
        if memory:  # no other handler reads the memory ring: folding the samples after the rest changes nothing
            self.last_memory = memory[-1]
            self.memory.append_many(_memory_rows(memory))
            self.versions["memory"] += 1
        if len(history):
            self.last_t = history[len(history) - 1].t
        return pending

    @property
    def history_loading(self) -> bool:
        """True while only the newest steps of a long history are in the rings (the rest is being folded)."""
        return self._pending_fold is not None

    def adopt(self, fold: HistoryFold, rings: StepRings | None = None) -> bool:
        """Swap in every row of ``fold`` (``rings``: ``fold.finish()``'s result); False when it is not this
        model's pending fold or steps arrived since the preview (the preview then stays: it is exact)."""
        if fold is not self._pending_fold:
            return False
        self._pending_fold = None
        rings = rings or fold.result
        if rings is None or self._preview_key != (id(self.steps), self.steps.total, self.steps.generation):
            return False
        self.steps, self._ema = rings.steps, rings.ema
        # In the model's order; a component only the left-out steps of a tail read carried comes last.
        self.scalars = {**{name: rings.scalars.get(name, ring) for name, ring in self.scalars.items()},
                        **{name: ring for name, ring in rings.scalars.items() if name not in self.scalars}}
        self.versions["charts"] += 1
        return True

    def _install(self, rings: StepRings) -> None:
        """Rings of a fresh model, from a fold (the preview's or every row)."""
        self.steps, self._ema = rings.steps, rings.ema
        self.scalars.update(rings.scalars)

    def _ingest_steps(self, steps: list[ev.StepLogged]) -> None:
        loss = np.fromiter((s.loss for s in steps), dtype=np.float64, count=len(steps))
        step = np.fromiter((s.step for s in steps), dtype=np.float64, count=len(steps))
        extra = {name: np.fromiter((_num(getattr(s, name, None)) for s in steps), dtype=np.float64, count=len(steps))
                 for name in STEP_FIELDS}
        for key in self._component_names(steps[-1], steps[0]):
            extra[key] = np.fromiter((_num((s.components or {}).get(key)) for s in steps), dtype=np.float64,
                                     count=len(steps))
        self._append_steps(step, loss, steps[-1], (steps[0].t, steps[0].step),
                           ((s.t, s.step) for s in steps[-self._rate.maxlen:]), extra)

    def _component_names(self, *samples: ev.StepLogged) -> list[str]:
        """Loss components to store: those the task declares, those already stored, those these steps carry."""
        names = [m.name for m in self.capabilities.curves if m.kind == "train" and m.name not in STEP_FIELDS]
        names += [k for k in self.scalars if k not in STEP_FIELDS]
        for sample in samples:
            names += [k for k, v in (sample.components or {}).items() if isinstance(v, (int, float))]
        return [k for k in dict.fromkeys(names) if k != "loss"]

    def _append_steps(self, step: np.ndarray, loss: np.ndarray, last: ev.StepLogged, first: tuple[float, int],
                      recent: Iterable[tuple[float, int]], extra: dict[str, np.ndarray] | None = None) -> None:
        keep = latest_attempts(step)
        if keep is not None:
            step, loss = step[keep], loss[keep]
            extra = {k: v[keep] for k, v in (extra or {}).items()}
        rewound = self._rewind_to(float(step[0])) if len(step) else False
        for name, values in (extra or {}).items():
            values = known(name, values)
            if name not in self.scalars:
                if np.isfinite(values).any():  # else never logged (a NaN grad norm of a run that does not measure it)
                    self.scalars[name] = scalar_ring(self.capacity, step, values)
                continue
            keep = self.scalars[name].capacity  # only the newest rows survive: copy no more than those
            self.scalars[name].append_many(np.stack([step[-keep:], values[-keep:]], axis=1))
        rows = np.empty((len(step), self.steps.width))
        rows[:, _STEP] = step
        rows[:, _LOSS] = loss
        for column, (level, state) in enumerate(zip(LEVELS[1:], self._ema), start=2):
            rows[:, column] = ema_extend(loss, level, state)
        self.steps.append_many(rows)
        if rewound:
            self._resmooth()
        self._stepped(last, first, recent)

    def _stepped(self, last: ev.StepLogged, first: tuple[float, int], recent: Iterable[tuple[float, int]]) -> None:
        """After steps went into the rings: the newest step, the rate samples, running, the panels to redraw."""
        self.last_step = last
        self.last_t = last.t
        self._stepped_since_phase = True
        if self._first_step is None:
            self._first_step = first
        self._rate.extend(recent)
        if self.state == "starting":
            self.state = "running"
            self.versions["header"] += 1
        self.versions["charts"] += 1
        self.versions["progress"] += 1

    def _rewind_to(self, first_new_step: float) -> bool:
        """Drop stored steps at or after ``first_new_step``: a resumed run redoes them from its checkpoint."""
        for ring in self.scalars.values():
            steps = ring.column(0)
            if len(steps) and steps[-1] >= first_new_step:
                ring.drop_newest(len(steps) - int(np.searchsorted(steps, first_new_step, side="left")))
        stored = self.steps.column(_STEP)
        if not len(stored) or stored[-1] < first_new_step:
            return False
        self.steps.drop_newest(len(stored) - int(np.searchsorted(stored, first_new_step, side="left")))
        return True

    def _resmooth(self) -> None:
        """Recompute every EMA column from the kept raw losses (after a rewind the running state is stale)."""
        loss = self.steps.column(_LOSS).copy()
        step = self.steps.column(_STEP).copy()
        self._ema = [EmaState() for _ in LEVELS[1:]]
        rows = np.empty((len(loss), self.steps.width))
        rows[:, _STEP], rows[:, _LOSS] = step, loss
        for column, (level, state) in enumerate(zip(LEVELS[1:], self._ema), start=2):
            rows[:, column] = ema_extend(loss, level, state)
        self.steps.drop_newest(len(loss))
        self.steps.append_many(rows)

    def _restart_rates(self, since: float, warm_up: bool = False) -> None:
        """Forget rate samples older than ``since`` (an event's time): a resume, a pause or a batch change
        starts a new pace, and mixing the old one in made steps/s and the ETA wrong for a whole window.

        Filtering by time rather than clearing keeps this right when a whole history is folded in
        (``_ingest_history`` adds every step before the other events): samples after ``since`` stay.
        ``warm_up`` (a new engine) also restarts the ETA's warm-up; a pause or a batch change does not.
        """
        keep = [(t, s) for t, s in self._rate if t >= since]
        self._rate.clear()
        self._rate.extend(keep)
        if warm_up:
            self._first_step = keep[0] if keep else None
        self.versions["progress"] += 1

    def _ingest_one(self, event: ev.Event) -> None:
        self.last_t = event.t
        rid = getattr(event, "request_id", None)
        if isinstance(event, (ev.SettingChanged, ev.Refused)) and rid is not None:
            if rid in self._acked:
                return  # the same ack, once from send() and once from the stream
            self._acked.add(rid)
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)

    def _log(self, kind: str, text: str, step: int | None = None) -> None:
        self.pending_log.append(LogEntry(kind, text, step))
        self.versions["log"] += 1

    def take_log(self) -> list[LogEntry]:
        """Log entries not yet shown (the log panel drains them at its own pace)."""
        out, self.pending_log = self.pending_log, []
        return out

    def note(self, kind: str, text: str) -> None:
        """A line from the dashboard itself (control acks, read-only refusals, widget errors)."""
        self._log(kind, text, self.step)

    def set_viewer(self, *, connection: str | None = None, read_only: bool | None = None) -> None:
        """Viewer facts the header shows (connection state, read-only)."""
        if connection is not None:
            self.connection = connection
        if read_only is not None:
            self.read_only = read_only
        self.versions["header"] += 1

    def set_liveness(self, liveness: str) -> None:
        """The session's liveness answer; a crash with no RunFinished marks the run failed."""
        if liveness == self.liveness:
            return
        self.liveness = liveness
        if liveness == "crashed" and self.finished is None and self.state not in ENDED_STATES:
            self.state, self.state_reason = "failed", "engine process died without finishing"
            self._log("error", "engine crashed: no heartbeat and the process is gone", self.step)
        self.versions["header"] += 1

    # ----------------------------------------------------------------- queries
    @property
    def step(self) -> int:
        """The newest step seen (the resume step before the first StepLogged)."""
        if self.last_step is not None:
            return self.last_step.step
        return self.started.start_step if self.started else 0

    @property
    def total_steps(self) -> int:
        """Planned optimizer steps (0 when unknown)."""
        return self.started.total_steps if self.started else 0

    @property
    def ended(self) -> bool:
        """True once the engine has stopped (finished, aborted, failed or crashed)."""
        return self.finished is not None or self.state in ENDED_STATES or self.liveness in ENDED_LIVENESS

    @property
    def train_config(self) -> dict:
        """RunStarted.config['train'] (empty before the run starts)."""
        if self.started is None:
            return {}
        return dict(self.started.config.get("train", {}) or {})

    def steps_per_s(self) -> float | None:
        """Recent steps/s from event timestamps (deterministic for replayed runs)."""
        if len(self._rate) < 2:
            return self.last_step.steps_per_s or None if self.last_step else None
        (t0, s0), (t1, s1) = self._rate[0], self._rate[-1]
        if t1 <= t0 or s1 <= s0:
            return None
        return (s1 - s0) / (t1 - t0)

    def eta_seconds(self) -> float | None:
        """Seconds to the last step, only after warm-up (≥10 steps and >10 s since the first step)."""
        if self._first_step is None or self.last_step is None or not self.total_steps:
            return None
        t0, s0 = self._first_step
        if self.last_step.step - s0 < ETA_MIN_STEPS or self.last_step.t - t0 <= ETA_MIN_SECONDS:
            return None
        rate = self.steps_per_s()
        if not rate:
            return None
        return max(0, self.total_steps - self.last_step.step) / rate

    def elapsed(self) -> float | None:
        """Seconds from RunStarted to the newest event."""
        if self.started is None or self.last_t is None:
            return None
        return max(0.0, self.last_t - self.started.t)

    # --------------------------------------------------------------- metrics
    @property
    def primary(self):
        """The task's primary metric (engine.core.taskspec.Metric): declared, else named by the evals, else val_loss."""
        metric, inferred = self._named_primary()
        if not inferred:
            return metric
        return replace(metric, higher_is_better=self._infer_higher(metric.name, metric.higher_is_better))

    def _named_primary(self):
        """(the primary metric, whether its direction must be inferred): cheap, for labels and names only.

        Inferring the direction reads every eval, so the eval handler (once per eval: quadratic over a long
        history) asks here instead.
        """
        caps = self.capabilities
        if self.started is not None and self.started.capabilities:
            return caps.primary, False
        named = next((getattr(e, "primary", "") for e in reversed(self.evals) if getattr(e, "primary", "")), "")
        if not named:
            return caps.primary, False
        return mx.describe(named, caps, "val"), True

    def _infer_higher(self, name: str, default: bool) -> bool:
        """An undeclared primary's direction, read off the engine's running ``best`` (the max or the min)."""
        xs, ys = self.val_series(name)
        best = next((e.best for e in reversed(self.evals) if isinstance(e.best, (int, float))), None)
        finite = ys[np.isfinite(ys)]
        if best is None or not len(finite) or finite.max() == finite.min():
            return default
        return abs(best - finite.max()) <= abs(best - finite.min())

    def train_names(self) -> list[str]:
        """Per-step scalars this run logs: loss first, then its components, grad norm, LR, throughput."""
        return (["loss"] if len(self.steps) else []) + list(self.scalars)

    def val_names(self) -> list[str]:
        """Validation metrics this run reports, in the order they first appeared."""
        return list(self._val_names)

    def choices(self) -> list[mx.Choice]:
        """Every scalar the chooser offers, primary first."""
        caps = self.capabilities
        if self.primary.name != caps.primary.name:
            caps = type(caps)(primary=self.primary, curves=caps.curves)
        return mx.catalog(caps, self.train_names(), self.val_names())

    def describe(self, name: str):
        """Label, unit and direction of the scalar ``name``."""
        if name == self._named_primary()[0].name:
            return self.primary
        return mx.describe(name, self.capabilities)

    def pair(self, name: str) -> tuple[str | None, str | None]:
        """(training scalar, validation metric) drawn when ``name`` is chosen (loss ↔ val_loss)."""
        return mx.pair(name, self.train_names(), self.val_names())

    def train_series(self, name: str, last: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of a per-step scalar (the raw loss for "loss"); the newest ``last`` when given."""
        if name == "loss":
            return self.steps.column(_STEP, last), self.steps.column(_LOSS, last)
        ring = self.scalars.get(name)
        if ring is None:
            return np.empty(0), np.empty(0)
        return ring.column(0, last), ring.column(1, last)

    def val_series(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of a validation metric over every eval that reported it."""
        pairs = [(e.step, v) for e in self.evals if isinstance(v := _eval_metrics(e).get(name), (int, float))]
        if not pairs:
            return np.empty(0), np.empty(0)
        arr = np.asarray(pairs, dtype=np.float64)
        return arr[:, 0], arr[:, 1]

    def val_loss_series(self) -> tuple[np.ndarray, np.ndarray]:
        """(steps, val loss) of every eval."""
        return self.val_series("val_loss")

    def best_primary(self) -> tuple[int, float] | None:
        """(step, value) of the best primary metric so far, by its direction."""
        return self.best_of(self.primary.name)

    def best_of(self, name: str) -> tuple[int, float] | None:
        """(step, value) of the best value of validation metric ``name``, by its declared direction."""
        xs, ys = self.val_series(name)
        finite = np.isfinite(ys)
        if not finite.any():
            return None
        higher = self.describe(name).higher_is_better
        i = int(np.argmax(np.where(finite, ys, -np.inf)) if higher else np.argmin(np.where(finite, ys, np.inf)))
        return int(xs[i]), float(ys[i])

    def abort_threshold(self) -> float | None:
        """The primary value past which the engine's abort policy counts an eval as bad.

        ``train.abort_drop`` (or the older ``abort_drop_db``) away from the best, on the worse side.
        """
        best = self.best_primary()
        train = self.train_config
        if best is None or not train.get("abort_patience", 2):
            return None
        drop = train.get("abort_drop", train.get("abort_drop_db", 1.5))
        if not isinstance(drop, (int, float)):
            return None
        return best[1] - float(drop) if self.primary.higher_is_better else best[1] + float(drop)

    def set_compare(self, other: "RunModel | None") -> None:
        """Overlay ``other``'s curves on every chart (None clears the overlay)."""
        self.compare = other
        self.versions["charts"] += 1

    # ---------------------------------------------------------------- phases
    @property
    def starting_up(self) -> bool:
        """True while the engine reports start-up phases and no step has arrived yet."""
        return bool(self.phases) and not self._stepped_since_phase and not self.ended

    def clock(self) -> float:
        """Now, for a live phase's elapsed time: the wall clock, or the newest event's time for a log that
        stopped long ago (a replayed start-up that never reached its first step must not count for days)."""
        now = time.time()
        if self.last_t is not None and now - self.last_t > STALE_CLOCK_S:
            return self.last_t
        return now

    def phase_lines(self, now: float) -> list[str]:
        """One line per start-up phase: finished ones with their duration, the current one with its elapsed time."""
        out = []
        for i, phase in enumerate(self.phases):
            done = i + 1 < len(self.phases)
            seconds = (self.phases[i + 1].t if done else now) - phase.t
            detail = f" ({phase.detail})" if phase.detail else ""
            mark = "✓" if done else "…"
            out.append(f"{mark} {phase.phase}{detail} {max(0.0, seconds):.1f}s")
        return out

    def budget_bytes(self) -> int | None:
        """The memory budget: the newest MemorySampled.budget, else RunStarted.budget.budget."""
        if self.last_memory is not None and self.last_memory.budget:
            return self.last_memory.budget
        return self.started.budget.budget if self.started else None

    def capacity_bytes(self) -> int | None:
        """Device capacity: the newest MemorySampled.capacity, else RunStarted.budget.capacity."""
        if self.last_memory is not None and self.last_memory.capacity:
            return self.last_memory.capacity
        return self.started.budget.capacity if self.started else None

    def setting(self, name: str) -> Any:
        """The current value of a live setting (``train.<name>`` or where the task declares it), newest change first.

        ``lr`` is the peak LR the schedule scales (what ``set lr`` changes), not
        the scheduled value of the last step (``last_step.lr``).
        """
        for marker in reversed(self.markers):
            if marker.name == name:
                return marker.new
        if name == "batch_size" and self.last_step is not None and self.last_step.batch_size:
            return self.last_step.batch_size
        config = self.started.config if self.started else {}
        declared = self.capabilities.setting(name)
        if declared is not None:
            node = config
            for part in declared.path.split("."):
                node = node.get(part) if isinstance(node, dict) else None
            return node
        # Undeclared (a run from before capabilities): train.<name>, else the first section that has it.
        sections = [config.get("train")] + [v for k, v in config.items() if k != "train"]
        return next((sec[name] for sec in sections if isinstance(sec, dict) and name in sec), None)

    def summary(self) -> str:
        """One line for after the app exits: how the run ended, its checkpoint, its export and how to resume."""
        name = self.started.name if self.started and self.started.name else "run"
        fin = self.finished
        status = fin.status if fin else self.state
        if fin is None and status not in ENDED_STATES and self.liveness in ENDED_LIVENESS:
            # The run dir's status (polled) said how the engine ended before its last events reached us.
            status = self.liveness
        parts = [f"{name}: {status} at step {fin.steps if fin else self.step}"]
        best = self.best_primary()
        if best is not None:
            metric = self.primary
            unit = f" {metric.unit}" if metric.unit else ""
            parts.append(f"best {metric.label or metric.name} {short_float(best[1])}{unit} @ {best[0]}")
        checkpoint = (fin.checkpoint if fin else None) or (self.checkpoints[-1].path if self.checkpoints else None)
        parts.append(f"checkpoint {checkpoint}" if checkpoint else "no checkpoint")
        if fin and fin.export:
            parts.append(f"export {fin.export}")
        if fin and fin.resume_command:
            parts.append(f"resume: {fin.resume_command}")
        return " · ".join(parts)


def _num(value: Any) -> float:
    """A logged number as a float; NaN for None or anything else."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else np.nan


def _eval_metrics(e: ev.EvalDone) -> dict:
    """Every validation metric of an eval by name (an event without ``metrics`` still has its val_loss)."""
    out = dict(getattr(e, "metrics", None) or {})
    val_loss = getattr(e, "val_loss", None)
    if "val_loss" not in out and isinstance(val_loss, (int, float)) and np.isfinite(val_loss):
        out["val_loss"] = val_loss
    return out


# ---------------------------------------------------------------- handlers
def _on_started(m: RunModel, e: ev.RunStarted) -> None:
    # Every RunStarted opens a new generation: an engine resumed the run (after an abort, a crash or a
    # finish), so whatever ended before no longer holds — state, rates, ETA and controls start afresh.
    m.started = e
    m.generation += 1
    m.resumed_from_step = e.start_step if e.resumed_from else None
    m.finished = None
    if m.state in ("starting", *ENDED_STATES):
        m.state, m.state_reason = "running", ""
    if m.liveness in ENDED_LIVENESS:
        m.liveness = "unknown"  # the session's next poll says what the new engine is
    if m.last_step is not None and m.last_step.t < e.t:
        m.last_step = None  # the progress line shows the resume step until the new engine logs one
    m._restart_rates(e.t, warm_up=True)
    m.capabilities = mx.capabilities_of(getattr(e, "capabilities", None))
    where = f" (resumed from {e.resumed_from} at step {e.start_step})" if e.resumed_from else ""
    m._log("state", f"run {e.name or '?'} started: {e.task}/{e.preset}, {e.total_steps} steps on {e.device}{where}",
           e.start_step)
    for area in ("header", "progress", "memory", "charts"):
        m.versions[area] += 1


def _on_eval(m: RunModel, e: ev.EvalDone) -> None:
    while m.evals and m.evals[-1].step >= e.step:  # a resumed run re-evaluates steps it had reached before
        m.evals.pop()
    m.evals.append(e)
    values = _eval_metrics(e)
    for name in values:
        if name not in m._val_names:
            m._val_names.append(name)
    primary = m._named_primary()[0]  # its label and unit; the direction (all evals read) is not needed here
    order = [primary.name] + [k for k in values if k != primary.name]  # the primary first: the line may be cut
    parts = []
    for name in order:
        value = values.get(name)
        if isinstance(value, (int, float)):
            metric = primary if name == primary.name else mx.describe(name, m.capabilities)
            parts.append(f"{metric.label or name} {short_float(value)}{' ' + metric.unit if metric.unit else ''}")
    m._log("eval", f"eval{' (best)' if e.is_best else ''}: {', '.join(parts)} in {e.seconds:.1f}s", e.step)
    m.versions["charts"] += 1
    m.versions["progress"] += 1


def _on_phase(m: RunModel, e: ev.PhaseStarted) -> None:
    if m._stepped_since_phase:  # an engine starting again (a resume): its phases replace the old ones
        m.phases, m._stepped_since_phase = [], False
    m.phases.append(e)
    m._log("state", f"phase: {e.phase}" + (f" ({e.detail})" if e.detail else ""))
    for area in ("charts", "progress"):
        m.versions[area] += 1


def _memory_rows(samples: list[ev.MemorySampled]) -> np.ndarray:
    """Memory-ring rows of many samples (NaN where None), as ``_on_memory`` stores them one at a time."""
    rows = np.array(list(map(operator.attrgetter(*MEM_COLUMNS), samples)), dtype=object).reshape(-1, len(MEM_COLUMNS))
    rows[np.equal(rows, None)] = np.nan
    return rows.astype(np.float64)


def _on_memory(m: RunModel, e: ev.MemorySampled) -> None:
    m.last_memory = e
    row = [e.step] + [np.nan if getattr(e, c) is None else getattr(e, c) for c in MEM_COLUMNS[1:]]
    m.memory.append_many(np.asarray([row], dtype=np.float64))
    m.versions["memory"] += 1


def _on_system(m: RunModel, e: ev.SystemSampled) -> None:
    m.system = e
    m.versions["system"] += 1


def _on_ranks(m: RunModel, e: ev.RanksSampled) -> None:
    m.ranks = e
    m.versions["system"] += 1  # the rank table is drawn in the system panel


def _on_checkpoint(m: RunModel, e: ev.CheckpointSaved) -> None:
    m.checkpoints.append(e)
    m._log("checkpoint", f"checkpoint ({e.kind}) {e.path} · {human_bytes(e.bytes)} in {e.seconds:.2f}s", e.step)
    m.versions["header"] += 1


def _on_export(m: RunModel, e: ev.ExportWritten) -> None:
    m._log("checkpoint", f"export ({e.kind}) {e.path} in {e.seconds:.2f}s", e.step)


def _on_checkpoint_failed(m: RunModel, e: ev.CheckpointFailed) -> None:
    m._log("error", f"checkpoint FAILED {e.path}: {e.error} (previous checkpoint intact)", e.step)


def _on_state(m: RunModel, e: ev.StateChanged) -> None:
    # Checkpointing and back is what every checkpoint does: the badge shows it, the log keeps the
    # CheckpointSaved line only (three lines per checkpoint buried everything else).
    routine = {e.state, m.state} == {"running", "checkpointing"}
    if e.state != m.state and not routine:
        m._log("state", f"state → {e.state}" + (f": {e.reason}" if e.reason else ""), e.step)
    if m.state == "paused" and e.state == "running":
        m._restart_rates(e.t)  # the pause is not part of the pace
    m.state, m.state_reason = e.state, e.reason
    m.versions["header"] += 1
    m.versions["progress"] += 1


#: Acks whose news another event already logs (StateChanged, CheckpointSaved).
_ACK_ONLY = ("state", "checkpoint")


def _on_setting(m: RunModel, e: ev.SettingChanged) -> None:
    why = f" ({e.reason})" if e.reason else ""
    if e.name not in _ACK_ONLY:
        m._log("setting", f"{e.name}: {e.old} → {e.new}{why}", e.step)
    if (e.name in MARKED_SETTINGS or m.capabilities.setting(e.name) is not None) and e.old != e.new:
        m.markers.append(Marker(e.step, e.name, e.old, e.new))
        if e.name != "lr":
            m._restart_rates(e.t)  # a new batch or kernel is a new pace; the LR does not change step time
        m.versions["charts"] += 1
        m.versions["progress"] += 1


def _on_refused(m: RunModel, e: ev.Refused) -> None:
    req = e.request or {}
    what = req.get("action", "?")
    if what == "set":
        what = f"set {req.get('name')}={req.get('value')}"
    m._log("refused", f"refused {what}: {e.why}", e.step)


def _on_warning(m: RunModel, e: ev.Warning) -> None:
    m._log("warning", e.text, e.step)


def _on_logline(m: RunModel, e: ev.LogLine) -> None:
    m._log("stderr" if e.stream == "stderr" else "output", e.text)


def _on_finished(m: RunModel, e: ev.RunFinished) -> None:
    m.finished = e
    m.state = _FINAL_STATE.get(e.status, "finished" if e.exit_code == 0 else "failed")
    m.state_reason = e.reason
    where = (f"; checkpoint {e.checkpoint}" if e.checkpoint else "") + (f"; export {e.export}" if e.export else "")
    m._log("finished", f"run {e.status} after {e.steps} steps" + (f": {e.reason}" if e.reason else "") + where, e.steps)
    for area in ("header", "progress"):
        m.versions[area] += 1


#: Event types whose handler only keeps the newest: a whole history folds just its last one of each.
_LATEST_ONLY = (ev.SystemSampled, ev.RanksSampled)

_HANDLERS = {
    ev.RunStarted: _on_started,
    ev.EvalDone: _on_eval,
    ev.MemorySampled: _on_memory,
    ev.SystemSampled: _on_system,
    ev.RanksSampled: _on_ranks,
    ev.CheckpointSaved: _on_checkpoint,
    ev.CheckpointFailed: _on_checkpoint_failed,
    ev.ExportWritten: _on_export,
    ev.StateChanged: _on_state,
    ev.SettingChanged: _on_setting,
    ev.Refused: _on_refused,
    ev.Warning: _on_warning,
    ev.LogLine: _on_logline,
    ev.PhaseStarted: _on_phase,
    ev.RunFinished: _on_finished,
}
