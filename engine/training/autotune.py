"""Live autotune: the fastest settings that fit, measured on the run's own training steps.

What it is for. `plan` picks the *largest* batch that fits, which is often not
the fastest (a data-bound CPU run gains nothing from a bigger batch; on a GPU a
blocked attention kernel or checkpointing changes speed by large factors). Lightning's
BatchSizeFinder and accelerate find what survives by running into
out-of-memory errors; DeepSpeed's autotuner starts a process per candidate.
This searches inside the run, refuses before trying, and keeps the run's math.

How (one component, driven by the loop at step boundaries):

- **Space**: the run's live settings (engine.training.autotune_space): the
  micro-batch with grad_accum keeping the effective batch, the task's declared
  kernel and memory settings, torch threads, data workers.
- **Filter**: every candidate goes through the one predictor first
  (``BudgetHook.peak_for``, the numbers a ``set`` and the tune modal's dry run
  are judged by); one predicted not to fit is never applied, so no
  out-of-memory error is triggered on purpose. They are counted.
- **Measure**: each candidate trains real steps: they count, and the effective
  batch, the sample order and the LR schedule go on untouched (grad_accum
  splits the same samples; the schedule follows the step count). The first
  ``autotune.warmup_steps`` after a change are not timed, nor any step while
  the batch plan measures or its worker processes start, nor a step whose
  peak the budget counted (2-4x slower); then ``autotune.window_steps`` are.
  A window whose first half is still clearly slower than its second did not
  settle: its first half is dropped and it runs on. The noise is the rate's
  relative 95 % half-width over the window, reported with every candidate.
  Halfway through, a window that already knows its rate within
  ``EARLY_NOISE``, or is slower than the best by more than the noise, ends:
  the search's time is mostly windows, and most candidates lose.
- **Search**: coordinate descent ordered by the prediction
  (engine.training.autotune_search), stopping where the rest cannot win by
  more than the noise.
- **Result**: the fastest by samples/s (tokens/s for a task that counts
  tokens) is applied, or the start kept when nothing beat it beyond the noise;
  ``AutotuneChose`` carries the table. The live config records it (checkpoints
  carry it; a resume continues with it and does not search again) and, on the
  rank that owns the run directory, config.toml is rewritten with it.

Across ranks every decision is made at a step count all ranks know (a window
ends at a fixed step), from rank 0's measurements broadcast to all, so each
candidate lands on every rank at the same boundary; the final ``AutotuneChose``
lists each rank's step and settings (gathered). A start or cancel comes as a
control request, which engine.distributed.controls already agrees on.

Cancel (the ``autotune`` request with mode ``cancel``, x in the dashboard's table)
restores the settings in force before the search, as a run ending during one
does. What a checkpoint taken during a search records, and how a resume goes on
from it: engine.training.autotune_state.

Not searched: the compile mode. ``runtime.compile`` is fixed for a run's life
(engine.training.compile says why: switching recompiles the whole model), so a
live search cannot try it; comparing modes takes a run each. Under compile, a
candidate's new micro-batch size recompiles once, inside its untimed warm-up
(a first window still slower than its second half runs on).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

from engine.core.core_sections import AutotuneConfig
from engine.run import events as ev
from engine.run.control.requests import Request
from engine.training import autotune_state as state
from engine.training.autotune_search import CoordinateSearch, Dimension, Measure, key, noise, settled
from engine.training.autotune_space import count_refused, dimensions

if TYPE_CHECKING:
    from engine.budget.hook import BudgetHook
    from engine.distributed.parallel import Single
    from engine.training.live_settings import LiveSettings
    from engine.training.sample_order import SampleOrder
    from engine.training.threads import Cores

#: Steps a run has taken before ``train --autotune`` starts: the first allocates the optimizer state. It also
#: waits for the batch plan to settle (its first batches measured, its worker processes up: the run's own
#: warm-up, not the search's), at most START_WAIT more steps.
START_AFTER = 2
START_WAIT = 100
#: Times a window may run on because it did not settle or had too few timed steps.
MAX_EXTENSIONS = 2
#: Seconds a candidate may warm up without a single timed step (worker processes starting, each importing torch)
#: before it is recorded as unmeasured.
MAX_WARM_S = 30.0
#: A window is looked at halfway (at least ``MIN_TIMED`` timed steps in) and ends there when its rate is already
#: known within ``EARLY_NOISE`` or is slower than the best by more than the noise: a clear loser or a steady rate
#: learns little from the second half, and the search's time is mostly windows. The price: two settings closer
#: than ~8 % may not be told apart (the bench measures what that costs against the grid).
MIN_TIMED = 4
EARLY_NOISE = 0.08


@dataclass
class Window:
    """One candidate being measured: from the step it was applied until ``until``."""

    settings: dict
    predicted: int | None
    began: int
    until: int
    times: list[tuple[float, float]] = field(default_factory=list)  # (seconds, samples) of each timed step
    warm: int = 0
    extensions: int = 0
    opened: float = field(default_factory=time.monotonic)
    #: The step of the halfway look (None: none left); ``until`` otherwise.
    check_at: int | None = None


class Progress(Protocol):
    """Where the run is (the Trainer): the last step done, and the steps it will run."""

    step: int
    total_steps: int


class Steering(Protocol):
    """How a search applies a candidate and answers a request: as the control handler does a viewer's ``set``."""

    def change(self, name: str, value: Any) -> tuple[Any, str]:
        """Apply a checked change: (old value, a note)."""

    def refuse(self, request: Request, why: str) -> None:
        """Answer ``request``: not applied, and why."""


class BatchPlan(Protocol):
    """What a search reads of the batch source (engine.training.batch_source.PlannedPrefetcher)."""

    cores: Cores  # the cores the run may use: torch threads and data workers are tried up to them

    @property
    def ready(self) -> bool:
        """The plan has settled: its first batches measured, its worker processes up."""


class Autotuner:
    """See the module docstring. The loop calls ``boundary()`` before each step and ``observe`` after it."""

    def __init__(self, config: AutotuneConfig, settings: LiveSettings, steering: Steering, budget: BudgetHook,
                 prefetch: BatchPlan, parallel: Single, progress: Progress, order: SampleOrder,
                 tokens_per_sample: Callable[[], int | None], emit: Callable[[ev.Event], None],
                 write_config: Callable[[str], None] | None = None,
                 checkpoint: Callable[[], str | None] | None = None) -> None:
        """``config``: the [autotune] section; ``settings``: the live knobs searched; ``steering`` applies a
        candidate; ``budget`` predicts whether one fits and measures its peak; ``prefetch``: whether the batch plan
        settled, and the cores; ``parallel``: one decision on every rank; ``order`` splits the batch over the
        ranks; ``tokens_per_sample`` (the task's) sets the unit; ``write_config(text)`` records the result in
        config.toml (None: not this rank's to write); ``checkpoint()`` writes ``last``, the result's other record."""
        self.config, self.settings, self.steering, self.budget = config, settings, steering, budget
        self.prefetch, self.parallel, self.progress, self.order = prefetch, parallel, progress, order
        self.tokens_per_sample, self.emit, self.write_config = tokens_per_sample, emit, write_config
        self.checkpoint = checkpoint or (lambda: None)
        self.search: CoordinateSearch | None = None
        self.window: Window | None = None
        self.dims: list[Dimension] = []
        self.table: list[dict] = []
        self._started_at = 0.0
        self._auto_due, self._auto_reason = config.on_start, "train --autotune"
        self._fits: dict[tuple, tuple[bool, int | None]] = {}
        self._since = (0, "")  # the step the search in progress began at, and why
        self._tried = 0  # candidates of the search tried so far, applied or not: each has its own number

    # -- the loop's and the control handler's interface -------------------------------------------
    @property
    def active(self) -> bool:
        """True while a search runs."""
        return self.search is not None

    def request(self, request) -> None:
        """A viewer's ``autotune`` request (at a step boundary, agreed across ranks): start or cancel."""
        if request.mode == "cancel":
            if not self.active:
                return self.steering.refuse(request, "no autotune is running")
            return self._conclude("cancelled", request_id=request.id)
        if self.active:
            return self.steering.refuse(request, "autotune is already running (cancel it first)")
        why = self.start("requested", request.id)
        if why:
            self.steering.refuse(request, why)

    def boundary(self) -> None:
        """Before each step: start the search ``train --autotune`` asked for, or end a window that is due."""
        if self._auto_due and not self.active and self.progress.step >= START_AFTER and self._settled():
            self._auto_due = False
            why = self.start(self._auto_reason)
            if why:
                self.emit(ev.Warning(text=f"autotune: {why}", step=self.progress.step))
        window = self.window
        if window is None:
            return
        current = self._current()
        if any(current[name] != value for name, value in window.settings.items()):
            return self._stop("the settings changed under it (a rollback, an out-of-memory back-off or a set)")
        if window.check_at is not None and self.progress.step >= window.check_at:
            window.check_at = None
            early = self.parallel.broadcast(self._early(window))  # rank 0's verdict, at a step all ranks know
            if early is not None:
                self._record(window, early)
                self._next()
            return
        if self.progress.step < window.until:
            return
        shared = self.parallel.broadcast(self._summary(window))  # rank 0's numbers decide on every rank
        if shared["more"]:
            window.until += self.config.window_steps
            window.extensions += 1
            return
        self._record(window, shared)
        self._next()

    def _settled(self) -> bool:
        """The batch plan has settled (or waited long enough), by rank 0's word on every rank."""
        ready = self.prefetch.ready or self.progress.step >= START_AFTER + START_WAIT
        return bool(self.parallel.broadcast(ready))  # a collective each boundary until the search starts

    def observe(self, step: int, seconds: float, samples: int) -> None:
        """After each step: its wall time and samples (the job's), timed unless it is part of the warm-up."""
        window = self.window
        if window is None or step <= window.began:
            return
        cold = (step - window.began <= self.config.warmup_steps or not self.prefetch.ready
                or self.budget.counted_step == step)
        if cold and not window.times:
            window.warm += 1
        elif not cold:
            window.times.append((seconds, samples))

    def close(self) -> bool:
        """The run ends during a search (an abort, its last step): the settings before it are restored, as a cancel
        does, so the last checkpoint and config.toml agree (no collective: a run may be ending). True when a search
        was running: the final checkpoint is written then even at a step that has one (taken during the search)."""
        if not self.active:
            return False
        start, why = self.search.start, "the run ended during it; settings before it restored"
        try:
            self._apply(start, f"autotune: {why}")
        except ValueError as exc:  # refused (all of it taken back): the settings in force stay, and say so
            start, why = None, f"the run ended during it; settings before it not restored ({exc})"
        self._stop(why, start)
        return True

    def recorded(self) -> tuple[dict, Any]:
        """(batch_size and grad_accum, the config) a checkpoint records: during a search those before it."""
        return state.recorded(self.settings, self.search.start if self.active else None)

    def state_dict(self) -> dict:
        """Checkpoint metadata: during a search, that one was running (a resume searches again)."""
        return state.mark(*self._since) if self.active else {}

    def resumed(self, meta: dict) -> None:
        """The run resumed from a checkpoint (``meta``): one taken during a search starts it again."""
        why = state.resumed(meta)
        if why:
            self._auto_due, self._auto_reason = True, why

    def _stop(self, reason: str, settings: dict | None = None) -> None:
        """End the search where it is with ``settings`` (default: those in force, kept; no collective)."""
        current = self._current()
        settings = settings or {d.name: current[d.name] for d in self.dims}
        self.emit(self._chose("stopped", settings, None, [], reason=reason))
        self.search = self.window = None

    # -- the search ------------------------------------------------------------------------------
    def start(self, reason: str, request_id: str | None = None) -> str:
        """Begin a search (the first candidate is the settings in force); the reason it cannot, or ""."""
        cfg, left = self.config, self.progress.total_steps - self.progress.step
        per_candidate = cfg.warmup_steps + cfg.window_steps
        if left < 2 * per_candidate:
            return f"too few steps left ({left}) to measure two candidates of {per_candidate} steps"
        current = self._current()
        dims, note = dimensions(self.settings.table, cfg.settings, self.order.per_rank(self.settings.batch_size),
                                self.prefetch.cores.usable, current)
        self.dims, note = self.parallel.broadcast((dims, note))  # rank 0's cores: one space on every rank
        if not self.dims:
            return "nothing to search: " + (note or "the task declares no settings with values to try")
        start = {d.name: current[d.name] for d in self.dims}
        self._fits = {}
        moves = self.settings.affects_memory
        count_refused(self.dims, start, self._predicted_to_fit, moves)  # every rank judges the whole grid once
        self._agree_on_fits()
        fit, refused = count_refused(self.dims, start, self._predicted_to_fit, moves)
        limit = min(cfg.max_candidates, left // per_candidate)
        self.search = CoordinateSearch(self.dims, start, self._predicted_to_fit, limit,
                                        peak=self._predicted_to_fit_peak)
        self.table, self._started_at, self._since, self._tried = [], time.monotonic(), (self.progress.step, reason), 0
        _, budget = self.budget.peak_for({})
        self.emit(ev.AutotuneStarted(step=self.progress.step, reason=reason, start=start,
                                     space={d.name: list(d.values) for d in self.dims}, candidates=fit,
                                     refused=refused, budget=budget, unit=self._unit(), note=note,
                                     request_id=request_id))
        self._next()
        return ""

    def _agree_on_fits(self) -> None:
        """A candidate fits only where it fits every rank's budget (each judged its own): the ranks' verdicts are
        gathered to rank 0, combined, and sent back, so every rank's search skips the same candidates."""
        parallel = self.parallel
        verdicts = parallel.gather(self._fits, "autotune fits")
        combined = None
        if verdicts is not None:
            combined = {k: (all(v[k][0] for v in verdicts), self._fits[k][1]) for k in self._fits}
        self._fits = parallel.broadcast(combined)

    def _next(self) -> None:
        candidate = self.search.next()
        if candidate is None:
            best, _ = self.search.result()
            self._conclude("kept" if key(best) == key(self.search.start) else "chosen")
            return
        self._tried += 1
        try:
            self._apply(candidate, f"autotune: candidate {self._tried}")
        except ValueError as exc:  # a task refusing a value it declared (TaskError): not this candidate
            self.emit(ev.Warning(text=f"autotune: {key(candidate)} not applied ({exc})", step=self.progress.step))
            self.search.record(candidate, Measure(0.0, 0.0))
            return self._next()
        cfg = self.config
        self.budget.open_window()
        began = self.progress.step
        check = began + cfg.warmup_steps + max(MIN_TIMED, cfg.window_steps // 2)
        until = began + cfg.warmup_steps + cfg.window_steps
        self.window = Window(candidate, self._predicted_to_fit_peak(candidate), began, until,
                             check_at=check if check < until else None)

    def _record(self, window: Window, shared: dict) -> None:
        measure = Measure(shared["rate"], shared["noise"])
        why = self.search.record(window.settings, measure)
        row = dict(step=self.progress.step, settings=window.settings, predicted=window.predicted,
                   measured=shared["measured"], rate=shared["rate"], steps_per_s=shared["steps_per_s"],
                   noise=shared["noise"], steps=shared["steps"], warmup=shared["warmup"], best=bool(why), why=why,
                   ended=shared.get("ended", ""))
        self.table.append(row)
        self.window = None
        self.emit(ev.AutotuneCandidate(**row))

    def _conclude(self, status: str, request_id: str | None = None) -> None:
        """Apply the result (the fastest, the start kept, or the start restored), say so, record it."""
        best, _ = self.search.result()
        target = self.search.start if status == "cancelled" else best
        self.search = self.window = None
        self._apply(target, "autotune: cancelled, settings before it restored" if status == "cancelled"
                    else "autotune: the fastest measured")
        self.settings.searched()
        ranks = self.parallel.gather({"rank": self.parallel.rank, "step": self.progress.step,
                                      "settings": {k: self._current()[k] for k in target}}, "autotune ranks")
        rate = next((row["rate"] for row in self.table if key(row["settings"]) == key(target)), None)
        start = self.table[0]["rate"] if self.table else None
        self._write_config()  # recorded before it is reported: a kill right after the report resumes with it
        self.checkpoint()
        self.emit(self._chose(status, target, rate, ranks or [], start_rate=start, request_id=request_id))

    # -- measuring --------------------------------------------------------------------------------
    def _early(self, window: Window) -> dict | None:
        """This rank's verdict at a window's halfway look: its measurement when the window may end there (a
        steady rate known within EARLY_NOISE, or a clear loser to the best so far), else None."""
        if len(window.times) < MIN_TIMED or not settled(window.times):
            return None
        summary = self._measured(window)
        best = self.search.best_measure if self.search is not None else None
        if summary["noise"] <= EARLY_NOISE or (best is not None
                                               and Measure(summary["rate"], summary["noise"]).loses_to(best)):
            return {**summary, "ended": "halfway"}
        return None

    def _summary(self, window: Window) -> dict:
        """This rank's verdict on a window: its rate and noise, or ``more`` when it must run on."""
        cfg = self.config
        times = window.times
        steady = settled(times)
        enough = len(times) >= max(2, cfg.window_steps // 2)
        cold = not times and time.monotonic() - window.opened < MAX_WARM_S
        if cold or ((not steady or not enough) and window.extensions < MAX_EXTENSIONS):
            if not steady:
                window.warm += len(times) // 2
                del times[:len(times) // 2]
            return {"more": True}
        return self._measured(window)

    def _measured(self, window: Window) -> dict:
        """A window's measurement from its timed steps so far."""
        times = window.times
        seconds = sum(s for s, _ in times) or 1e-9
        samples = sum(n for _, n in times)
        per_sample = self._per_sample()
        return {"more": False, "rate": samples * per_sample / seconds, "steps_per_s": len(times) / seconds,
                "noise": noise([s for s, _ in times]), "steps": len(times), "warmup": window.warm,
                "measured": self.budget.window_peak()}

    def _per_sample(self) -> float:
        tokens = self.tokens_per_sample()
        return float(tokens) if tokens else 1.0

    def _unit(self) -> str:
        return "tokens/s" if self.tokens_per_sample() else "samples/s"

    def _predicted_to_fit(self, settings: dict) -> bool:
        return self._judge(settings)[0]

    def _predicted_to_fit_peak(self, settings: dict) -> int | None:
        return self._judge(settings)[1]

    def _judge(self, settings: dict) -> tuple[bool, int | None]:
        """(fits, predicted peak) of ``settings``, by the budget's own prediction; cached by the memory settings."""
        memory = {k: v for k, v in settings.items() if self.settings.affects_memory(k)}
        cache_key = key(memory)
        if cache_key not in self._fits:
            try:
                predicted, budget = self.budget.peak_for(memory)
            except ValueError:
                predicted, budget = None, 0  # a value the config refuses never fits
            fits = budget is None or (predicted is not None and predicted <= budget)
            self._fits[cache_key] = (fits, predicted)
        return self._fits[cache_key]

    # -- applying ---------------------------------------------------------------------------------
    def _current(self) -> dict[str, Any]:
        """Every searchable setting's value in force."""
        settings = self.settings
        return {s.name: settings.value(s.name) for s in settings.table.entries if s.autotune}

    def _apply(self, target: dict, reason: str) -> None:
        """Change what differs from ``target``, all of it or none (engine.training.autotune_state.apply_all)."""
        state.apply_all(self.settings, self.steering.change, self._current(), target, [d.name for d in self.dims],
                        self.emit, self.progress.step, reason)

    def _chose(self, status: str, settings: dict, rate: float | None, ranks: list, start_rate=None,
               request_id: str | None = None, reason: str = "") -> ev.AutotuneChose:
        chosen = key(settings)
        table = [{**row, "chosen": key(row["settings"]) == chosen} for row in self.table]
        return ev.AutotuneChose(step=self.progress.step, status=status, settings=dict(settings),
                                rate=rate, start_rate=start_rate, table=table,
                                seconds=time.monotonic() - self._started_at, ranks=ranks, reason=reason,
                                request_id=request_id)

    def _write_config(self) -> None:
        """config.toml records the tuned settings (the owner rank; a run without a directory has none)."""
        state.write_config(self.write_config, self.settings.config, self.emit, self.progress.step)
