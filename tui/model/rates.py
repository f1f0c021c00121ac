"""The run's pace: recent steps/s and the ETA, from event timestamps (deterministic for a replayed run).

A resume, a pause or a batch change starts a new pace, so the samples are kept
by time and ``restart`` forgets the older ones; mixing the old pace in made
steps/s and the ETA wrong for a whole window.
"""

from __future__ import annotations

from collections import deque
from typing import Iterable

from engine.run import events as ev

#: Warm-up before an ETA is shown (Burn's rule: at least 10 steps and more than 10 s).
ETA_MIN_STEPS = 10
ETA_MIN_SECONDS = 10.0
#: (t, step) samples kept for steps/s: the newest this many steps.
RATE_WINDOW = 256


class Rates:
    """The newest (t, step) samples and the first (t, step) of the current engine, for steps/s and the ETA."""

    def __init__(self) -> None:
        self.samples: deque[tuple[float, int]] = deque(maxlen=RATE_WINDOW)
        #: (t, step) the ETA's warm-up counts from (None until a step arrives).
        self.first: tuple[float, int] | None = None

    def add(self, first: tuple[float, int], recent: Iterable[tuple[float, int]]) -> None:
        """Steps arrived: ``first`` is the oldest of them, ``recent`` the newest (t, step) samples."""
        if self.first is None:
            self.first = first
        self.samples.extend(recent)

    def restart(self, since: float, warm_up: bool = False) -> None:
        """Forget samples older than ``since`` (an event's time); ``warm_up`` (a new engine) also restarts the
        ETA's warm-up, a pause or a batch change does not.

        Filtering by time rather than clearing keeps this right when a whole history is folded in (every
        step goes in before the other events): samples after ``since`` stay.
        """
        keep = [(t, s) for t, s in self.samples if t >= since]
        self.samples.clear()
        self.samples.extend(keep)
        if warm_up:
            self.first = keep[0] if keep else None

    def steps_per_s(self, last_step: ev.StepLogged | None) -> float | None:
        """Recent steps/s; with fewer than two samples the engine's own figure on ``last_step``."""
        if len(self.samples) < 2:
            return last_step.steps_per_s or None if last_step else None
        (t0, s0), (t1, s1) = self.samples[0], self.samples[-1]
        if t1 <= t0 or s1 <= s0:
            return None
        return (s1 - s0) / (t1 - t0)

    def eta_seconds(self, last_step: ev.StepLogged | None, total_steps: int) -> float | None:
        """Seconds to ``total_steps``, only after warm-up (≥10 steps and >10 s since the first step)."""
        if self.first is None or last_step is None or not total_steps:
            return None
        t0, s0 = self.first
        if last_step.step - s0 < ETA_MIN_STEPS or last_step.t - t0 <= ETA_MIN_SECONDS:
            return None
        rate = self.steps_per_s(last_step)
        if not rate:
            return None
        return max(0, total_steps - last_step.step) / rate
