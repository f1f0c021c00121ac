"""Policies the loop consults, each owning its config: abort on PSNR drop, non-finite steps, checkpoint timing.

Kept out of the loop so it stays short, and so each rule has one place to read
and test. All are plain Python (no torch) and serialise to JSON for checkpoints.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass
class AbortPolicy:
    """Stop when the primary metric sits more than ``drop`` below its best on ``patience`` consecutive evals.

    Seed 003's rule (1.5 dB, 2 evals). For a lower-is-better metric the drop is
    measured upwards. ``patience == 0`` disables it.
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
