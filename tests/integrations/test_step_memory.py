"""StepMemory.next_count: a caller that skips ``begin`` before the step it names never skips a counted step."""

from __future__ import annotations

from torch import nn

from engine.app.integrations.memory import StepMemory
from engine.budget.hook import CALIBRATE_AT, CPU_MEASURE_EVERY

LAST = 4 * CPU_MEASURE_EVERY + 3


def test_next_count_names_every_step_that_counts_and_none_before_it() -> None:
    memory = StepMemory(nn.Linear(2, 1), lambda: None, "cpu")
    first = 7  # a resumed run's first step
    assert memory.next_count(first) == first  # before the first step is named, any step may count
    # without a begin, counts() answers from the step alone (no count yet, so the seconds floor has passed)
    counted = [step for step in range(first, LAST) if memory.counts(step)]
    assert counted == [first + CALIBRATE_AT - 1, *range(CPU_MEASURE_EVERY, LAST, CPU_MEASURE_EVERY)]
    for step in range(first + 1, LAST):
        due = memory.next_count(step)
        assert due >= step and not any(step <= c < due for c in counted), (step, due)
        assert due in counted or due >= LAST, (step, due)
