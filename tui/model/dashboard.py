"""What the dashboard knows about a run: events folded into plain state and numpy history.

The UI thread owns one ``RunModel``; batches of events from the session worker
are folded in with ``ingest``. Widgets never see events, only this model, and
each panel redraws only when its ``versions`` counter moved, which is what
keeps the bytes on the wire low. Torch- and Textual-free, so it is tested on
its own.

The model is composed of parts that each own their state: the step series
(tui.model.step_series: the run's step record, read by what is drawn; nothing
is held per step, so the model's memory does not grow with the run), the pace
(tui.model.rates), the metric catalogue and
validation series (tui.model.catalogue), the start-up phases
(tui.model.phases), the settings and budget (tui.model.settings); every other
event is folded by tui.model.event_fold. The methods here are the one surface
widgets, screens and the apps read.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Iterable

import numpy as np

from engine.run import events as ev
from engine.run.rundir import Liveness
from tui.model import metrics as mx
from tui.model import settings
from tui.model.autotune import AutotuneState
from tui.model.catalogue import Catalogue
from tui.model.event_fold import ENDED_LIVENESS, ENDED_STATES, LATEST_ONLY, LOG_KEPT, MEM_COLUMNS, EventFold
from tui.model.format import short_float
from tui.model.history import Ring
from tui.model.phases import Phases, clock, model_summary
from tui.model.rates import Rates, Throughput
from tui.model.settings import Marker
from tui.model.step_series import StepSeries
from tui.model.step_source import RecordSteps

#: Memory samples kept (one every ~100 steps: the newest 6.5M steps' worth).
MEMORY_SAMPLES = 1 << 16
#: What a RunModel keeps of the samples taken on a clock (event type → how many of the newest): all a history
#: it opens need hold of them (``Session.history(newest=...)``; a long run has a million memory samples).
SAMPLES_KEPT = {"memory": MEMORY_SAMPLES, **{cls.type: 1 for cls in LATEST_ONLY}}
#: What a RunModel keeps of those as columns, not events (``Session.history(columns=...)``): the memory ring's,
#: so its 65,536 rows cost a struct decode of six fields each, not as many event objects (and the newest sample
#: is still one whole event, for the gauge).
SAMPLE_COLUMNS = {"memory": MEM_COLUMNS}


@dataclass(frozen=True)
class LogEntry:
    """One line for the log panel: ``kind`` picks its colour (eval, checkpoint, setting, refused, …)."""

    kind: str
    text: str
    step: int | None = None


class RunModel:
    """Everything the panels draw, folded from events; ``versions[area]`` counts changes per panel."""

    def __init__(self) -> None:
        self.versions: Counter[str] = Counter()
        self.started: ev.RunStarted | None = None
        self.state = "starting"
        self.state_reason = ""
        self.liveness = "unknown"
        #: A stalled engine's silence and process state (engine.run.rundir.Liveness); None unless stalled.
        self.stall: Liveness | None = None
        self.finished: ev.RunFinished | None = None
        #: RunStarted events seen: each (a fresh start or a resume) opens a new generation of the run.
        self.generation = 0
        #: The step the current generation resumed from (None for a fresh start).
        self.resumed_from_step: int | None = None
        self.last_step: ev.StepLogged | None = None
        #: The per-step series: the run's step record once open, else the step events held in memory.
        self.series = StepSeries()
        #: (bytes done, bytes in all) while an old run's log is converted into its record; None otherwise.
        self.steps_progress: tuple[int, int] | None = None
        #: Recent (t, step) samples for steps/s and the ETA.
        self.rates = Rates()
        #: The task's capabilities, every eval, the validation metrics.
        self.catalogue = Catalogue()
        #: Start-up phases reported before the first step.
        self.startup = Phases()
        #: Another run drawn behind this one's curves, aligned by step (a RunModel; None: no overlay).
        self.compare: RunModel | None = None
        self.memory = Ring(MEMORY_SAMPLES, len(MEM_COLUMNS))
        self.last_memory: ev.MemorySampled | None = None
        self.system: ev.SystemSampled | None = None
        #: The latest per-rank telemetry of a distributed run (None for one process).
        self.ranks: ev.RanksSampled | None = None
        #: The run's autotune: the search running or the last one, its table.
        self.autotune = AutotuneState()
        self.markers: list[Marker] = []
        self.checkpoints: list[ev.CheckpointSaved] = []
        self.pending_log: list[LogEntry] = []
        self.last_t: float | None = None
        #: Viewer side: "connecting", "connected" or "failed: <why>".
        self.connection = "connecting"
        #: True when this viewer may not send controls.
        self.read_only = False
        self._events = EventFold(self)

    # ------------------------------------------------------------------ parts
    @property
    def steps(self):
        """The step source (tui.model.step_source): the run's record, or the step events held in memory."""
        return self.series.source

    @property
    def step_count(self) -> int:
        """Steps the source holds (a record's rows)."""
        return self.series.source.rows

    @property
    def evals(self) -> list[ev.EvalDone]:
        """Every eval of the run (a re-evaluated step keeps its newest)."""
        return self.catalogue.evals

    @property
    def capabilities(self):
        """The task's declared capabilities (primary metric, curves); the val_loss fallback until RunStarted."""
        return self.catalogue.capabilities

    @property
    def phases(self) -> list[ev.PhaseStarted]:
        """Start-up phases reported before the first step (PhaseStarted), oldest first."""
        return self.startup.phases

    # ------------------------------------------------------------------ ingest
    def ingest(self, batch: Iterable[ev.Event]) -> None:
        """Fold a batch of events in; consecutive step events are appended to the step series in one go.

        A whole ``engine.run.history.store.History`` is folded from its columns (no step event is built). With
        the run's step record open, step events are not kept: the record has every step (and the log may have
        step lines only at a cadence); the record is looked at again instead.
        """
        if hasattr(batch, "column") and hasattr(batch, "others"):  # a whole engine.run.history.store.History
            self._ingest_history(batch)
            return
        steps: list[ev.StepLogged] = []
        for event in batch:
            if isinstance(event, ev.StepLogged):
                steps.append(event)
                continue
            if steps:
                self._ingest_steps(steps)
                steps = []
            self._events.fold(event)
        if steps:
            self._ingest_steps(steps)

    def ingest_ack(self, ack: ev.Event) -> None:
        """An ack returned by ``Session.send``: folded in unless the event stream already brought it."""
        self._events.fold(ack)

    def _ingest_history(self, history) -> None:
        """A run's history: its step columns into a memory source (none with a record open), then the other
        events in bulk. Folding them after the steps changes nothing: no handler reads the step series."""
        step = history.column("step", "step")
        if len(step) and not self.series.from_record:
            columns = {name: history.column("step", name) for name in history.step_columns() if name != "step"}
            last = next(history[i] for i in range(len(history) - 1, -1, -1) if history[i].type == "step")
            self.series.append_columns(step.astype(np.int64), columns, last)
            self._stepped()
        self._events.fold_many(history.others("step"), history.sample_columns.get("memory"))
        if len(history):
            self.last_t = max(self.last_t or float("-inf"), history[len(history) - 1].t)

    def open_steps(self, source: RecordSteps) -> None:
        """Read the per-step series from the run's step record from now on."""
        self.series.use(source)
        self._stepped()
        self.versions["charts"] += 1

    def refresh_steps(self) -> bool:
        """Take in what the run's record gained (a live run, a conversion filling in); True when it changed."""
        if not self.series.refresh():
            return False
        self._stepped()
        return True

    def _ingest_steps(self, steps: list[ev.StepLogged]) -> None:
        if self.series.from_record:
            self.refresh_steps()  # the record is written before the log: it holds these and maybe more
            return
        self.series.append_events(steps)
        self._stepped()

    def _stepped(self) -> None:
        """After steps arrived: the newest step, the rate samples, running, the panels to redraw."""
        last, first, recent = self.series.latest()
        if last is None:
            return
        self.last_step = last
        self.last_t = last.t if self.last_t is None else max(self.last_t, last.t)
        self.startup.stepped = True
        if first is not None:
            self.rates.add(first, recent)
        if self.state == "starting":
            self.state = "running"
            self.versions["header"] += 1
        self.versions["charts"] += 1
        self.versions["progress"] += 1

    def log(self, kind: str, text: str, step: int | None = None) -> None:
        """A line for the log panel (``kind`` picks its colour)."""
        self.pending_log.append(LogEntry(kind, text, step))
        self.versions["log"] += 1

    def take_log(self) -> list[LogEntry]:
        """The newest LOG_KEPT log entries not yet shown (the log panel drains them at its own pace)."""
        out, self.pending_log = self.pending_log[-LOG_KEPT:], []
        return out

    def note(self, kind: str, text: str) -> None:
        """A line from the dashboard itself (control acks, read-only refusals, widget errors)."""
        self.log(kind, text, self.step)

    def set_viewer(self, *, connection: str | None = None, read_only: bool | None = None) -> None:
        """Viewer facts the header shows (connection state, read-only)."""
        if connection is not None:
            self.connection = connection
        if read_only is not None:
            self.read_only = read_only
        self.versions["header"] += 1

    def set_liveness(self, liveness: str, detail: Liveness | None = None) -> None:
        """The session's liveness answer; a process gone with no RunFinished marks the run crashed (the word
        ``runs`` uses), said as whose process it was: the engine's, or the user's own script's. A stalled one
        (its process there, its heartbeat stale: ``detail`` says since when and in what state) is logged once
        per stall, and again when it beats again."""
        stall = (detail or Liveness("stalled")) if liveness == "stalled" else None
        if liveness == self.liveness and stall == self.stall:
            return
        was, self.liveness, self.stall = self.liveness, liveness, stall
        if liveness == "crashed" and self.finished is None and self.state not in ENDED_STATES:
            whose = "your script's process" if self.own_script else "the engine's process"
            self.state, self.state_reason = "crashed", f"{whose} died without finishing"
            self.log("error", f"crashed: {whose} is gone without finishing (no heartbeat)", self.step)
        elif stall is not None and was != "stalled":
            self.log("warning", stall.describe(), self.step)
        elif was == "stalled" and liveness == "live":
            self.log("state", "the engine beats again: live", self.step)
        self.versions["header"] += 1

    def tick(self) -> None:
        """The text tick with nothing new: what counts time redraws (a start-up phase's clock, a stall's seconds)."""
        if self.starting_up:
            self.versions["charts"] += 1
            self.versions["progress"] += 1
        if self.stall is not None:
            self.versions["header"] += 1

    def set_steps_progress(self, done: int, total: int, finished: bool = False) -> None:
        """An old run's conversion moved on: the record gained rows (looked at now) and the charts say how far."""
        self.steps_progress = None if finished else (done, total)
        self.refresh_steps()
        self.versions["charts"] += 1

    def set_compare(self, other: "RunModel | None") -> None:
        """Overlay ``other``'s curves on every chart (None clears the overlay)."""
        self.compare = other
        self.versions["charts"] += 1

    # ----------------------------------------------------------------- queries
    @property
    def step(self) -> int:
        """The newest step seen (the resume step before the first StepLogged)."""
        if self.last_step is not None:
            return self.last_step.step
        return self.started.start_step if self.started else 0

    @property
    def own_script(self) -> bool:
        """True when the run is the user's own training loop reporting through an integration (engine.app): their
        script owns the process, and only their command resumes it."""
        return self.started is not None and isinstance(self.started.config.get("integration"), dict)

    @property
    def total_steps(self) -> int:
        """Planned optimizer steps (0 when unknown)."""
        return self.started.total_steps if self.started else 0

    @property
    def ended(self) -> bool:
        """True once the engine has stopped (finished, aborted, failed or crashed)."""
        return self.finished is not None or self.state in ENDED_STATES or self.liveness in ENDED_LIVENESS

    @property
    def policies_config(self) -> dict:
        """RunStarted.config['policies'] (empty before the run starts, and for a run of another loop)."""
        if self.started is None:
            return {}
        return dict(self.started.config.get("policies", {}) or {})

    def steps_per_s(self) -> float | None:
        """Recent steps/s from event timestamps (deterministic for replayed runs)."""
        return self.rates.steps_per_s(self.last_step)

    def throughput(self) -> Throughput | None:
        """Recent steps/s, samples/s and tokens/s, from one window so they agree (steps/s × batch = samples/s);
        samples/s or tokens/s is None where the run does not count them (an integration given no batch size)."""
        return self.rates.throughput(self.last_step)

    def eta_seconds(self) -> float | None:
        """Seconds to the last step, only after warm-up (≥10 steps and >10 s since the first step)."""
        return self.rates.eta_seconds(self.last_step, self.total_steps)

    def elapsed(self) -> float | None:
        """Seconds from RunStarted to the newest event."""
        if self.started is None or self.last_t is None:
            return None
        return max(0.0, self.last_t - self.started.t)

    # --------------------------------------------------------------- metrics
    @property
    def primary(self):
        """The task's primary metric (engine.core.taskspec.Metric): declared, else named by the evals, else val_loss."""
        return self.catalogue.primary

    def train_names(self) -> list[str]:
        """Per-step scalars this run logs: loss first, then its components, grad norm, LR, throughput."""
        return self.series.names()

    def val_names(self) -> list[str]:
        """Validation metrics this run reports, in the order they first appeared."""
        return self.catalogue.val_names()

    def choices(self) -> list[mx.Choice]:
        """Every scalar the chooser offers, primary first."""
        return self.catalogue.choices(self.train_names())

    def describe(self, name: str):
        """Label, unit and direction of the scalar ``name``."""
        return self.catalogue.describe(name)

    def pair(self, name: str) -> tuple[str | None, str | None]:
        """(training scalar, validation metric) drawn when ``name`` is chosen (loss ↔ val_loss)."""
        return self.catalogue.pair(name, self.series.chart_names())

    def step_bounds(self, name: str) -> tuple[int, int] | None:
        """First and last step of a per-step scalar (None: it has none)."""
        return self.series.bounds(name)

    def step_envelope(self, name: str, step_lo: int, step_hi: int, columns: int):
        """Per column of [step_lo, step_hi], the exact min / max / last and the mean of a per-step scalar
        (engine.run.steps.Envelope; None: no such scalar)."""
        return self.series.envelope(name, step_lo, step_hi, columns)

    def val_series(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of a validation metric over every eval that reported it."""
        return self.catalogue.val_series(name)

    def val_loss_series(self) -> tuple[np.ndarray, np.ndarray]:
        """(steps, val loss) of every eval."""
        return self.catalogue.val_series("val_loss")

    def best_primary(self) -> tuple[int, float] | None:
        """(step, value) of the best primary metric so far, by its direction."""
        return self.catalogue.best_of(self.primary.name)

    def best_of(self, name: str) -> tuple[int, float] | None:
        """(step, value) of the best value of validation metric ``name``, by its declared direction."""
        return self.catalogue.best_of(name)

    def abort_threshold(self) -> float | None:
        """The primary value past which the engine's abort policy counts an eval as bad."""
        return self.catalogue.abort_threshold(self.policies_config)

    # ---------------------------------------------------------------- phases, settings, budget
    @property
    def starting_up(self) -> bool:
        """True while the engine reports start-up phases and no step has arrived yet."""
        return bool(self.startup.phases) and not self.startup.stepped and not self.ended

    def clock(self) -> float:
        """Now, for a live phase's elapsed time (the newest event's time for a log that stopped long ago)."""
        return clock(self.last_t)

    def phase_lines(self, now: float) -> list[str]:
        """One line per start-up phase: finished ones with their duration, the current one with its elapsed time."""
        return self.startup.lines(now)

    @property
    def model_summary(self) -> str:
        """Parameters (trainable), precision, device and data size once the engine has built them ("" before)."""
        return model_summary(self.started)

    def budget_bytes(self) -> int | None:
        """The memory budget: the newest MemorySampled.budget, else RunStarted.budget.budget."""
        return settings.budget_bytes(self.last_memory, self.started)

    def capacity_bytes(self) -> int | None:
        """Device capacity: the newest MemorySampled.capacity, else RunStarted.budget.capacity."""
        return settings.capacity_bytes(self.last_memory, self.started)

    def setting(self, name: str) -> Any:
        """The current value of a live setting (``train.<name>`` or where the task declares it), newest change first."""
        config = self.started.config if self.started else {}
        return settings.setting_value(name, self.markers, self.last_step, config, self.capabilities)

    def end_status(self) -> str:
        """How the run ended (finished, aborted, interrupted, failed, crashed), or its state while it has not."""
        fin = self.finished
        status = fin.status if fin else self.state
        if fin is None and status not in ENDED_STATES and self.liveness in ENDED_LIVENESS:
            # The run dir's status (polled) said how the engine ended before its last events reached us.
            status = self.liveness
        return status

    def summary(self) -> str:
        """One line for after the app exits: how the run ended, its checkpoint, its export and how to resume."""
        name = self.started.name if self.started and self.started.name else "run"
        fin = self.finished
        parts = [f"{name}: {self.end_status()} at step {fin.steps if fin else self.step}"]
        best = self.best_primary()
        if best is not None:
            metric = self.primary
            unit = f" {metric.unit}" if metric.unit else ""
            parts.append(f"best {metric.label or metric.name} {short_float(best[1])}{unit} @ {best[0]}")
        newest = self.checkpoints[-1] if self.checkpoints else None
        said = fin or ev.RunFinished(steps=self.step, checkpoint=newest.path if newest else None)  # a crash: no end
        if said.checkpoint_step is None and newest is not None and newest.path == said.checkpoint:
            said = replace(said, checkpoint_step=newest.step)  # the log says the step where the record did not
        parts.append(said.checkpoint_said())
        if fin and fin.export:
            parts.append(f"export {fin.export}")
        if fin and fin.resume_command:
            parts.append(f"resume: {fin.resume_command}")
        return " · ".join(parts)
