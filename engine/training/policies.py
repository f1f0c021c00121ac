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

#: NaN rollbacks to the same checkpoint in a row before the run stops: data that is NaN at a fixed
#: position replays identically after every rollback, and without a cap the run would loop forever.
MAX_ROLLBACKS_TO_ONE_STEP = 3


def agree(flag: bool) -> bool:
    """One process: the decision is this process's own (a distributed run replaces this with an all-reduce)."""
    return bool(flag)


@dataclass
class AbortPolicy:
    """Stop when the primary metric sits more than ``drop`` below its best on ``patience`` consecutive evals.

    The config defaults to a drop of 1.5 on 2 evals (train.abort_drop, abort_patience). For a
    lower-is-better metric the drop is measured upwards. ``patience == 0`` disables it.
    """

    drop: float
    patience: int
    higher_is_better: bool = True
    best: float | None = None
    strikes: int = 0

    def update(self, value: float | None) -> tuple[bool, bool]:
        """Record an eval; returns (is_new_best, should_abort)."""
        if value is None or not math.isfinite(value):
            return False, False
        better = self.best is None or (value > self.best if self.higher_is_better else value < self.best)
        if better:
            self.best = value
            self.strikes = 0
            return True, False
        gap = (self.best - value) if self.higher_is_better else (value - self.best)
        self.strikes = self.strikes + 1 if gap > self.drop else 0
        return False, self.patience > 0 and self.strikes >= self.patience

    def state(self) -> dict:
        """JSON form for checkpoints."""
        return asdict(self)


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
