"""The run's pace: recent steps/s, samples/s and tokens/s and the ETA, from event timestamps (deterministic for a
replayed run).

The three rates come from one window of the newest steps (engine.run.pace), so they agree: steps/s × the batch
= samples/s. (The dashboard once showed a smoothed steps/s beside the last step's own samples/s.) A resume, a
pause or a batch change starts a new pace, so the samples are kept by time and ``restart`` forgets the older
ones; mixing the old pace in made steps/s and the ETA wrong for a whole window.
"""

from __future__ import annotations

from typing import Iterable

from engine.run import events as ev
from engine.run.pace import Pace, Sample, per_step
from engine.run.pace import Rates as Throughput

#: Warm-up before an ETA is shown (Burn's rule: at least 10 steps and more than 10 s).
ETA_MIN_STEPS = 10
ETA_MIN_SECONDS = 10.0
#: Logged steps kept for the rates: the newest this many.
RATE_WINDOW = 256


class Rates:
    """The newest step samples (engine.run.pace) and the first (t, step) of the current engine, for the rates and
    the ETA."""

    def __init__(self) -> None:
        self.pace = Pace(RATE_WINDOW)
        #: (t, step) the ETA's warm-up counts from (None until a step arrives).
        self.first: tuple[float, int] | None = None

    @property
    def samples(self):
        """The window's samples, oldest first: (t, step, samples a step, tokens a step)."""
        return self.pace.samples

    def add(self, first: tuple[float, int], recent: Iterable[Sample]) -> None:
        """Steps arrived: ``first`` is the oldest of them, ``recent`` the newest as engine.run.pace samples."""
        if self.first is None:
            self.first = first
        self.pace.extend(recent)

    def restart(self, since: float, warm_up: bool = False) -> None:
        """Forget samples older than ``since`` (an event's time); ``warm_up`` (a new engine) also restarts the
        ETA's warm-up, a pause or a batch change does not.

        Filtering by time rather than clearing keeps this right when a whole history is folded in (every
        step goes in before the other events): samples after ``since`` stay.
        """
        self.pace.forget_before(since)
        if warm_up:
            self.first = tuple(self.samples[0][:2]) if self.samples else None

    def throughput(self, last_step: ev.StepLogged | None) -> Throughput | None:
        """Recent steps/s, samples/s and tokens/s, all from one window (None for what the run does not count);
        with fewer than two samples the engine's own figures on ``last_step``."""
        found = self.pace.rates()
        if found is not None or len(self.samples) >= 2 or last_step is None or not last_step.steps_per_s:
            return found
        rate = last_step.steps_per_s
        samples, tokens = per_step(last_step.samples_per_s, rate, last_step.tokens_per_s, last_step.batch_size)
        return Throughput(rate, samples * rate if samples is not None else None,
                          tokens * rate if tokens is not None else None)

    def steps_per_s(self, last_step: ev.StepLogged | None) -> float | None:
        """Recent steps/s (``throughput``'s)."""
        found = self.throughput(last_step)
        return found.steps_per_s if found is not None else None

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


def pace_samples(t, step, samples_per_s, steps_per_s, tokens_per_s) -> list[Sample]:
    """The window's samples from a history's step columns (arrays of one length), as ``of_event`` makes them from
    step events."""
    columns = (t.tolist(), step.tolist(), samples_per_s.tolist(), steps_per_s.tolist(), tokens_per_s.tolist())
    return [(when, int(at), *per_step(samples, steps, tokens)) for when, at, samples, steps, tokens in zip(*columns)]
