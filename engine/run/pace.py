"""A run's pace over its newest steps: steps/s, samples/s and tokens/s from one window, so they agree.

Each step event carries its own rates (engine.training.throughput: one step's samples and tokens over that
step's seconds), which jump from step to step and leave out what happens between steps (an evaluation, a
checkpoint, data the step waited for). A reader wants the pace over the last while, and every number of one
line from the same while: steps/s × the batch = samples/s. A viewer once showed a smoothed steps/s beside the
last step's samples/s (14.5 it/s · 1100 sa/s · bs 32), which no batch explains.

So the window holds, for each of the newest logged steps, its time, its step number and what one step of it
trained (samples, tokens: the event's own rates divided by its steps/s, which is how the engine made them).
Over the window: steps/s = steps done ÷ seconds; samples/s = the samples those steps trained ÷ the same
seconds; tokens/s likewise. A batch that changes inside the window is weighted by the steps it trained.

Unknown is not zero: a plain loop that never said its batch size trains an unknown number of samples (None),
where its events carry 0. Torch-free; the headless console (engine.run.sinks) and the dashboard's model
(tui.model.rates) read the same numbers from it.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Rates:
    """One window's pace; ``samples_per_s`` / ``tokens_per_s`` are None where the run does not count them."""

    steps_per_s: float
    samples_per_s: float | None = None
    tokens_per_s: float | None = None


#: One logged step as the window keeps it: (time, step, samples a step, tokens a step), amounts None if unknown.
Sample = tuple[float, int, "float | None", "float | None"]


def per_step(samples_per_s: float, steps_per_s: float, tokens_per_s: float = 0.0,
             batch_size: int = 0) -> tuple[float | None, float | None]:
    """(samples, tokens) one step of a step event trained, from the event's rates (its batch size when it has no
    rate yet: an integration's first logged step); None where the event counts none."""
    if steps_per_s > 0:
        samples = samples_per_s / steps_per_s if samples_per_s > 0 else None
        tokens = tokens_per_s / steps_per_s if tokens_per_s > 0 else None
        return samples, tokens
    return (float(batch_size) if batch_size > 0 else None), None


def of_event(event) -> Sample:
    """The window's sample of a StepLogged."""
    return (event.t, event.step, *per_step(event.samples_per_s, event.steps_per_s, event.tokens_per_s,
                                           event.batch_size))


class Pace:
    """The newest ``window`` logged steps (see the module docstring); ``rates()`` is their pace."""

    def __init__(self, window: int) -> None:
        self.samples: deque[Sample] = deque(maxlen=window)

    def extend(self, samples: Iterable[Sample]) -> None:
        """Steps arrived, oldest first."""
        self.samples.extend(samples)

    def forget_before(self, since: float) -> None:
        """Drop the samples older than ``since`` (a resume, a pause or a batch change starts a new pace)."""
        keep = [s for s in self.samples if s[0] >= since]
        self.samples.clear()
        self.samples.extend(keep)

    def rates(self) -> Rates | None:
        """The window's pace; None with fewer than two samples or no time or no steps between them."""
        if len(self.samples) < 2:
            return None
        first, last = self.samples[0], self.samples[-1]
        seconds, steps = last[0] - first[0], last[1] - first[1]
        if seconds <= 0 or steps <= 0:
            return None
        return Rates(steps / seconds, _amount(self.samples, 2, seconds), _amount(self.samples, 3, seconds))


def _amount(samples: deque[Sample], column: int, seconds: float) -> float | None:
    """Σ (steps since the previous sample × that sample's amount a step) ÷ ``seconds``; None if any is unknown."""
    total, previous = 0.0, samples[0][1]
    for sample in itertools.islice(samples, 1, None):
        amount = sample[column]
        if amount is None:
            return None
        total += (sample[1] - previous) * amount
        previous = sample[1]
    return total / seconds
