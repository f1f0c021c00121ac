"""Every event but a step, folded into a RunModel: one handler per event type, each redrawing its panels.

Steps go straight into the step series in batches (RunModel.ingest); all the
other events are few (an eval, a checkpoint, a sample every ~100 steps) and
each is folded here through the model's public parts: its state fields, its
log, its rates, its catalogue of metrics and its start-up phases. A panel
redraws only when its ``versions`` counter moved, so each handler bumps the
areas whose content it changed.
"""

from __future__ import annotations

import operator
from typing import Any, Iterable

import numpy as np

from engine.run import events as ev
from tui.model.format import change_text, human_bytes, short_float
from tui.model.phases import model_summary
from tui.model.settings import Marker, is_marked

#: States in which the engine no longer runs.
ENDED_STATES = ("finished", "aborted", "failed", "crashed")
#: Liveness answers that mean the engine is gone.
ENDED_LIVENESS = ("finished", "aborted", "failed", "crashed")
#: RunFinished.status → the state it leaves the run in.
FINAL_STATE = {"finished": "finished", "aborted": "aborted", "interrupted": "aborted", "failed": "failed"}
#: Columns of the memory ring.
MEM_COLUMNS = ("step", "allocated", "reserved", "peak", "nvml_used", "predicted")
#: Log entries the log panel keeps (its scrollback, tui.widgets.log): an older one is never shown once as many
#: newer ones arrived, so a whole history's fold does not word the evals so many newer evals follow.
LOG_KEPT = 2000
#: Acks whose news another event already logs (StateChanged, CheckpointSaved).
ACK_ONLY = ("state", "checkpoint")
#: Event types whose handler only keeps the newest: a whole history folds just its last one of each.
LATEST_ONLY = (ev.SystemSampled, ev.RanksSampled)


def memory_rows(samples: list[ev.MemorySampled]) -> np.ndarray:
    """Memory-ring rows of samples (NaN where None), one row per sample in MEM_COLUMNS order."""
    rows = np.array(list(map(operator.attrgetter(*MEM_COLUMNS), samples)), dtype=object).reshape(-1, len(MEM_COLUMNS))
    rows[np.equal(rows, None)] = np.nan
    return rows.astype(np.float64)


class EventFold:
    """Folds the non-step events into ``model`` (a RunModel); remembers the acks already folded.

    An ack comes twice, once from ``Session.send`` and once from the event stream: the second is dropped.
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self._acked: set[str] = set()
        self._handlers = {
            ev.RunStarted: self._started, ev.EvalDone: self._eval, ev.MemorySampled: self._memory,
            ev.SystemSampled: self._system, ev.RanksSampled: self._ranks, ev.CheckpointSaved: self._checkpoint,
            ev.CheckpointFailed: self._checkpoint_failed, ev.ExportWritten: self._export,
            ev.StateChanged: self._state, ev.SettingChanged: self._setting, ev.Refused: self._refused,
            ev.Warning: self._warning, ev.LogLine: self._logline, ev.PhaseStarted: self._phase,
            ev.CompileDone: self._compiled, ev.RunFinished: self._finished, ev.AutotuneStarted: self._autotune,
            ev.AutotuneCandidate: self._autotune, ev.AutotuneChose: self._autotune,
        }

    def fold(self, event: ev.Event) -> None:
        """One event (a step event is ignored: steps go to the step series)."""
        self.model.last_t = event.t
        rid = getattr(event, "request_id", None)
        if isinstance(event, (ev.SettingChanged, ev.Refused, ev.AutotuneStarted, ev.AutotuneChose)) and rid is not None:
            if rid in self._acked:
                return  # the same ack, once from send() and once from the stream
            self._acked.add(rid)
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    def fold_many(self, events: Iterable[ev.Event], memory_columns: dict[str, np.ndarray] | None = None) -> None:
        """The non-step events of a whole history, in bulk: the samples (a memory and a system sample every
        ~100 steps: most of these events) cost one ring append, and only the newest system / rank sample.
        ``memory_columns`` (MEM_COLUMNS → column, read as columns: tui.model.dashboard.SAMPLE_COLUMNS) are the
        ring's rows; the memory events are then only the newest, for the gauge.

        Same result as folding them one by one: no handler reads the memory ring or a superseded sample, and an
        eval so many newer evals follow that its log line would never be shown is kept, not worded (a 100M-step
        run has 10,000 evals).
        """
        events = list(events)
        latest = {}
        unworded = sum(type(event) is ev.EvalDone for event in events) - LOG_KEPT
        for event in events:
            if type(event) in LATEST_ONLY:
                latest[type(event)] = event
            elif type(event) is ev.EvalDone and unworded > 0:
                unworded -= 1
                self._keep_eval(event)
            elif type(event) is not ev.MemorySampled:
                self.fold(event)
        for event in latest.values():
            self.fold(event)
        memory = [e for e in events if type(e) is ev.MemorySampled]
        if memory:
            self.model.last_memory = memory[-1]
        rows = memory_rows(memory) if memory_columns is None else \
            np.column_stack([memory_columns[name] for name in MEM_COLUMNS])
        if len(rows):
            self.model.memory.append_many(rows)
            self.model.versions["memory"] += 1

    def _redraw(self, *areas: str) -> None:
        for area in areas:
            self.model.versions[area] += 1

    def _restart_rates(self, since: float, warm_up: bool = False) -> None:
        self.model.rates.restart(since, warm_up)
        self._redraw("progress")

    def _started(self, e: ev.RunStarted) -> None:
        # Every RunStarted opens a new generation: an engine resumed the run (after an abort, a crash or a
        # finish), so whatever ended before no longer holds — state, rates, ETA and controls start afresh.
        m = self.model
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
        self._restart_rates(e.t, warm_up=True)
        m.catalogue.declare(getattr(e, "capabilities", None))
        where = f" (resumed from {e.resumed_from} at step {e.start_step})" if e.resumed_from else ""
        m.log("state", f"run {e.name or '?'} started: {e.task}/{e.preset}, {e.total_steps} steps on {e.device}"
              f"{where}", e.start_step)
        m.log("state", f"model: {model_summary(e)}", e.start_step)
        self._redraw("header", "progress", "memory", "charts")

    def _keep_eval(self, e: ev.EvalDone) -> dict:
        """The eval into the catalogue (its series, the best); its metrics by name."""
        self._redraw("charts", "progress")
        return self.model.catalogue.add_eval(e)

    def _eval(self, e: ev.EvalDone) -> None:
        values = self._keep_eval(e)
        catalogue = self.model.catalogue
        primary = catalogue.named_primary()[0]  # its label and unit; the direction (all evals read) is not needed
        order = [primary.name] + [k for k in values if k != primary.name]  # the primary first: the line may be cut
        parts = []
        for name in order:
            value = values.get(name)
            if isinstance(value, (int, float)):
                metric = primary if name == primary.name else catalogue.describe(name)
                parts.append(f"{metric.label or name} {short_float(value)}{' ' + metric.unit if metric.unit else ''}")
        self.model.log("eval", f"eval{' (best)' if e.is_best else ''}: {', '.join(parts)} in {e.seconds:.1f}s", e.step)

    def _phase(self, e: ev.PhaseStarted) -> None:
        if not self.model.startup.start(e):
            return  # heard live while the engine started, now read again from its log
        self.model.log("state", f"phase: {e.phase}" + (f" ({e.detail})" if e.detail else ""))
        self._redraw("charts", "progress")

    def _memory(self, e: ev.MemorySampled) -> None:
        self.model.last_memory = e
        self.model.memory.append_many(memory_rows([e]))
        self._redraw("memory")

    def _system(self, e: ev.SystemSampled) -> None:
        self.model.system = e
        self._redraw("system")

    def _ranks(self, e: ev.RanksSampled) -> None:
        self.model.ranks = e
        self._redraw("system")  # the rank table is drawn in the system panel

    def _checkpoint(self, e: ev.CheckpointSaved) -> None:
        self.model.checkpoints.append(e)
        self.model.log("checkpoint", f"checkpoint ({e.kind}) {e.path} · {human_bytes(e.bytes)} in {e.seconds:.2f}s",
                       e.step)
        self._redraw("header")

    def _export(self, e: ev.ExportWritten) -> None:
        self.model.log("checkpoint", f"export ({e.kind}) {e.path} in {e.seconds:.2f}s", e.step)

    def _checkpoint_failed(self, e: ev.CheckpointFailed) -> None:
        self.model.log("error", f"checkpoint FAILED {e.path}: {e.error} (previous checkpoint intact)", e.step)

    def _state(self, e: ev.StateChanged) -> None:
        m = self.model
        # Checkpointing and back is what every checkpoint does: the badge shows it, the log keeps the
        # CheckpointSaved line only (three lines per checkpoint buried everything else).
        routine = {e.state, m.state} == {"running", "checkpointing"}
        if e.state != m.state and not routine:
            m.log("state", f"state → {e.state}" + (f": {e.reason}" if e.reason else ""), e.step)
        if m.state == "paused" and e.state == "running":
            self._restart_rates(e.t)  # the pause is not part of the pace
        m.state, m.state_reason = e.state, e.reason
        self._redraw("header", "progress")

    def _setting(self, e: ev.SettingChanged) -> None:
        m = self.model
        why = f" ({e.reason})" if e.reason else ""
        if e.name not in ACK_ONLY:
            m.log("setting", f"{e.name}: {change_text(e.old, e.new)}{why}", e.step)
        if is_marked(e.name, m.capabilities) and e.old != e.new:
            m.markers.append(Marker(e.step, e.name, e.old, e.new))
            if e.name != "lr":
                self._restart_rates(e.t)  # a new batch or kernel is a new pace; the LR does not change step time
            self._redraw("charts", "progress")

    def _refused(self, e: ev.Refused) -> None:
        req = e.request or {}
        what = req.get("action", "?")
        if what == "set":
            what = f"set {req.get('name')}={req.get('value')}"
        self.model.log("refused", f"refused {what}: {e.why}", e.step)

    def _autotune(self, e: ev.Event) -> None:
        self.model.log("setting", self.model.autotune.fold(e), getattr(e, "step", None))
        self._redraw("autotune", "header")

    def _warning(self, e: ev.Warning) -> None:
        self.model.log("warning", e.text, e.step)

    def _compiled(self, e: ev.CompileDone) -> None:
        """The start-up compile (the 'compiling' phase's seconds), or a recompile with dynamo's reason."""
        if e.first:
            self.model.log("state", f"compiled {e.frames} function(s) in {e.seconds:.1f} s ({e.mode}, {e.backend})",
                           e.step)
        else:
            self.model.log("warning", f"recompiled {e.recompiles} in {e.seconds:.1f} s "
                           f"({e.total_recompiles} so far): {'; '.join(e.reasons) or 'no reason given'}", e.step)

    def _logline(self, e: ev.LogLine) -> None:
        self.model.log("stderr" if e.stream == "stderr" else "output", e.text)

    def _finished(self, e: ev.RunFinished) -> None:
        m = self.model
        m.finished = e
        m.state = FINAL_STATE.get(e.status, "finished" if e.exit_code == 0 else "failed")
        m.state_reason = e.reason
        where = (f"; checkpoint {e.checkpoint}" if e.checkpoint else "") + (f"; export {e.export}" if e.export else "")
        m.log("finished", f"run {e.status} after {e.steps} steps" + (f": {e.reason}" if e.reason else "") + where,
              e.steps)
        self._redraw("header", "progress")
