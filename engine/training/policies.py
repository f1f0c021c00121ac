"""Policies the loop consults, each owning its config: abort on a metric drop, non-finite steps, OOM back-off,
checkpoint timing.

Kept out of the loop so it stays short, and so each rule has one place to read
and test. All are plain Python (no torch) and serialise to JSON for checkpoints.

Every decision that changes control flow (skip a non-finite step, roll back,
halve the micro-batch) goes through one function, ``agree(flag) -> bool``: in
one process it is the identity; a distributed run passes one that all-reduces
the flag (any rank's True is every rank's), so all ranks take the same branch
at the same step and no collective is left waiting.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable

from engine.run import events as ev

#: How ranks agree on a decision: ``agree(flag)`` is True on every rank if it is True on any.
Agree = Callable[[bool], bool]

#: What a resume of a run the abort policy stopped adds to continue (the rule off; its state is kept).
CONTINUE_FLAGS = " --set policies.abort_patience=0"

#: NaN rollbacks to the same checkpoint in a row before the run stops: data that is NaN at a fixed
#: position replays identically after every rollback, and without a cap the run would loop forever.
MAX_ROLLBACKS_TO_ONE_STEP = 3


def agree(flag: bool) -> bool:
    """One process: the decision is this process's own (a distributed run replaces this with an all-reduce)."""
    return bool(flag)


@dataclass
class AbortPolicy:
    """Stop when the primary metric sits more than ``drop`` worse than its best on a long enough streak.

    What a long run must survive, each a rule here:

    - **warm-up**: the LR rises over the first ``armed_from`` steps and the
      metric may get worse as designed (a 3M-step run was stopped at step
      137,750 of a 150,000-step warm-up). Before ``armed_from`` no eval is a
      strike, and the reference the drop is measured from is the best since
      the policy armed, not a warm-up value the peak LR was never meant to keep;
    - **patience at any step rate**: a streak of strikes stops the run only
      once it spans ``patience`` evals *and* ``patience_steps`` steps *and*
      ``patience_s`` seconds (two evals 50 steps apart were 0.5 s of training
      at 100 steps/s). Seconds are counted between evals of this process, so a
      resume neither skips nor double-counts them;
    - ``patience == 0`` disables it;
    - **a value that is not finite** (NaN, inf, or missing) is never the best nor
      a strike: it cannot be compared. It was skipped silently, and a metric NaN
      from some eval on left the run without a best checkpoint and without a
      word; ``not_finite_from`` now marks where such a run of evals began, so
      the evaluator warns once (``not_finite_line``) and the run's end line
      says no best was kept since (``end_note``).

    ``best`` is the run's best (the ``best`` checkpoint, EvalDone.best), kept
    through warm-up. For a lower-is-better metric the drop is measured upwards.
    """

    drop: float
    patience: int
    higher_is_better: bool = True
    armed_from: int = 0
    patience_steps: int = 0
    patience_s: float = 0.0
    best: float | None = None
    #: The best since the policy armed: what a drop is measured from.
    reference: float | None = None
    strikes: int = 0
    #: Step of the streak's first strike (None: no streak).
    streak_step: int | None = None
    #: Seconds the streak has lasted so far.
    streak_s: float = 0.0
    #: Step of the first eval in the current run of evals whose value was not finite (None: the last one was).
    not_finite_from: int | None = None
    _last_eval: float | None = field(default=None, repr=False, compare=False)

    def update(self, value: float | None, step: int = 0, now: float = 0.0) -> tuple[bool, bool]:
        """Record the eval at ``step`` (``now``: a monotonic clock in seconds); returns (is_new_best, should_abort)."""
        since, self._last_eval = (None if self._last_eval is None else now - self._last_eval), now
        if value is None or not math.isfinite(value):
            if self.not_finite_from is None:
                self.not_finite_from = step
            return False, False
        self.not_finite_from = None
        is_best = self.best is None or self._better(value, self.best)
        if is_best:
            self.best = value
        if step < self.armed_from:  # warming up: nothing is judged yet
            return is_best, False
        if self.reference is None or self._better(value, self.reference):
            self.reference, self.strikes, self.streak_step, self.streak_s = value, 0, None, 0.0
            return is_best, False
        gap = (self.reference - value) if self.higher_is_better else (value - self.reference)
        if gap <= self.drop:
            self.strikes, self.streak_step, self.streak_s = 0, None, 0.0
            return is_best, False
        if self.streak_step is None:
            self.streak_step = step
        elif since is not None:
            self.streak_s += since
        self.strikes += 1
        return is_best, self.patience > 0 and self.strikes >= self.patience and \
            step - self.streak_step >= self.patience_steps and self.streak_s >= self.patience_s

    def _better(self, value: float, than: float) -> bool:
        return value > than if self.higher_is_better else value < than

    def reason(self, metric: str, value: float, step: int) -> str:
        """The line that says why the run stopped (after ``update`` said it should) and what lets it go on."""
        worse = "below" if self.higher_is_better else "above"
        gap = abs(self.reference - value)
        return (f"val {metric} {value:.4g} sat more than {self.drop:g} {worse} its best {self.reference:.4g} since "
                f"warm-up on {self.strikes} consecutive evals ({step - self.streak_step} steps, "
                f"{self.streak_s:.0f} s); to go on, resume with{CONTINUE_FLAGS} (the rule off) or "
                f"--set policies.abort_drop={_above(gap)} (allows this gap)")

    def not_finite_line(self, metric: str, value: float | None, step: int) -> str:
        """The warning when a run of evals that are not finite begins (``not_finite_from == step``)."""
        what = "missing" if value is None else f"{value}"
        return (f"val {metric} is {what} at step {step}: not finite, so it is never the best and the abort rule "
                "cannot judge it; no best checkpoint is kept while it stays so")

    def end_note(self, metric: str) -> str:
        """What the run's end line adds when its last evals were not finite ("" when the last one was)."""
        if self.not_finite_from is None:
            return ""
        if self.best is None:
            return f"no best kept: val {metric} was never finite (from step {self.not_finite_from} on)"
        return f"no best kept since step {self.not_finite_from}: val {metric} not finite from there on"

    def state(self) -> dict:
        """JSON form for checkpoints: what the policy has seen (its settings come from the run's config)."""
        return {"best": self.best, "reference": self.reference, "strikes": self.strikes,
                "streak_step": self.streak_step, "streak_s": self.streak_s, "not_finite_from": self.not_finite_from}

    def load_state(self, state: dict) -> None:
        """Continue from ``state`` (``state()``'s, or an older checkpoint's {drop, patience, best, strikes})."""
        self.best, self.strikes = state.get("best"), int(state.get("strikes") or 0)
        self.reference, self.streak_step = state.get("reference", self.best), state.get("streak_step")
        self.streak_s = float(state.get("streak_s") or 0.0)
        self.not_finite_from = state.get("not_finite_from")


def _above(gap: float) -> str:
    """A round drop a little above ``gap`` (two significant figures, rounded up)."""
    if gap <= 0 or not math.isfinite(gap):
        return "0"
    scale = 10 ** (math.floor(math.log10(gap)) - 1)
    return f"{math.ceil(gap * 1.01 / scale) * scale:.6g}"


@dataclass
class NanGuard:
    """Counts consecutive non-finite steps; says when ``patience`` is reached."""

    patience: int
    consecutive: int = 0
    total: int = 0

    def record(self, finite: bool) -> bool:
        """Record one step; True when the consecutive count just reached patience."""
        if finite:
            self.consecutive = 0
            return False
        self.consecutive += 1
        self.total += 1
        return self.consecutive >= self.patience

    def state(self) -> dict:
        """JSON form for checkpoints."""
        return asdict(self)


@dataclass
class CheckpointPolicy:
    """When to write ``last`` (every N steps and at each eval) and which step-N files to keep."""

    every_steps: int
    keep_last: int

    def due(self, step: int) -> bool:
        """True when step ``step`` should write ``last``."""
        return self.every_steps > 0 and step > 0 and step % self.every_steps == 0


def eval_due(step: int, every: int, total: int) -> bool:
    """Evaluate every ``every`` steps and always at the last step."""
    return step == total or (every > 0 and step % every == 0)


@dataclass
class NanPolicy:
    """Non-finite steps: each one is skipped; after ``guard.patience`` in a row, ``policy`` decides.

    ``rollback`` reloads the newest good checkpoint with the LR scaled by
    ``lr_factor`` (at most MAX_ROLLBACKS_TO_ONE_STEP times to the same step),
    ``skip`` warns and goes on, ``stop`` ends the run.
    """

    policy: str
    guard: NanGuard
    lr_factor: float = 0.5
    agree: Agree = field(default=agree, repr=False)
    #: (step last rolled back to, rollbacks to it in a row).
    rollback_point: tuple[int, int] = (-1, 0)

    def skip_step(self, finite: bool) -> bool:
        """Decide (agreed across ranks) whether this step's optimizer update is skipped."""
        return self.agree(not finite)

    def record(self, skipped: bool) -> str:
        """Count a step; "ok", "warn" (skipped, patience not reached), or the policy once patience is reached."""
        if not self.guard.record(not skipped):
            return "warn" if skipped else "ok"
        return self.policy  # under "skip", ``respond`` restarts the count once it has said how many

    def respond(self, decision: str, step: int, rollback: Callable[[], int | None], optim) -> tuple:
        """Carry out ``record``'s decision: (the event to emit or None, the reason the run must stop or "").

        "rollback" calls ``rollback()`` (the step it reloaded, None without a good checkpoint) and scales
        ``optim.lr_scale`` by ``lr_factor``; the run's count of skipped steps survives the reload.
        """
        consecutive = self.guard.consecutive
        if decision == "warn":
            return ev.Warning(text=f"step {step}: non-finite loss or gradient; optimizer step skipped "
                              f"({consecutive} in a row)", step=step), ""
        reason = f"{consecutive} consecutive non-finite steps"
        if decision == "skip":
            self.guard.consecutive = 0  # the next patience-long run of skips warns again
            return ev.Warning(text=f"{reason}; still skipping (nan_policy=skip)", step=step), ""
        if decision not in ("stop", "rollback"):
            return None, ""
        lr_scale, total = optim.lr_scale, self.guard.total
        step = None if decision == "stop" else rollback()
        if step is None:
            return None, f"stopped: {reason}" + (" and no good checkpoint to roll back to" if decision != "stop"
                                                 else "")
        self.guard.total = total  # ``rollback`` loaded the checkpoint's guard
        if not self.rolled_back(step):
            return None, (f"stopped: {reason} again after {MAX_ROLLBACKS_TO_ONE_STEP} rollbacks to step {step} "
                          f"(LR x{lr_scale:g}); the same steps keep giving non-finite values")
        optim.lr_scale = lr_scale * self.lr_factor
        return ev.SettingChanged(name="lr", old=None, new=optim.peak_lr * optim.lr_scale, step=step,
                                 reason=f"{reason}: rolled back to step {step} from its checkpoint, "
                                 f"LR x{self.lr_factor}"), ""

    def rolled_back(self, step: int) -> bool:
        """Note a rollback to ``step``; False when that is one too many in a row (the run should stop)."""
        point, count = self.rollback_point
        self.rollback_point = (step, count + 1 if point == step else 1)
        self.guard.consecutive = 0
        return self.rollback_point[1] <= MAX_ROLLBACKS_TO_ONE_STEP

    def state_dict(self) -> dict:
        """The counters (JSON, for checkpoints)."""
        return self.guard.state()


@dataclass
class OomPolicy:
    """Out of memory in a step: double grad_accum (halving the micro-batch, the effective batch kept) and retry."""

    enabled: bool
    agree: Agree = field(default=agree, repr=False)

    def backoff(self, batch_size: int, grad_accum: int) -> int | None:
        """The grad_accum to retry with (agreed across ranks), or None when the OOM must propagate."""
        if not self.agree(self.enabled and grad_accum < batch_size):
            return None
        return min(batch_size, grad_accum * 2)
