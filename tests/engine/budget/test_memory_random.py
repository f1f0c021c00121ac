"""The memory budget on configurations nobody tuned it on: never under the truth, at most +10 % over.

A handful of seeded random configurations per task (bench.memory_random draws them: every LM and LoRA setting,
LoRA's dropout among them, shape, batch, sequence, attention implementation, activation checkpointing, gradient
accumulation, and the data path: built inline, on the builder thread, in worker processes or planned), each
predicted as the start guard predicts it (the analytic bound, or the trace for a task without one: in process
here), with the batches the data path builds ahead, and counted through the dispatcher over three real steps
with that many batches built beside them (engine.budget.truth, method "dispatcher"). The worst of each task is
printed (pytest -s shows it); bench.memory_random runs 30 per task.
"""

from __future__ import annotations

import pytest

from bench.memory_random import configs, predict

pytestmark = pytest.mark.slow

#: Configs per task on every CI run (the seeds are fixed: the same ones every time).
PER_TASK = {"lm": 5, "sensorlm": 3, "toy": 3, "gapfill": 2}


@pytest.mark.parametrize("task", list(PER_TASK))
def test_random_configs_are_never_under_and_at_most_ten_percent_over(task: str) -> None:
    import torch

    from engine.budget import ahead, truth

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rows = []
        for label, config in configs(task, PER_TASK[task], seed=0):
            predicted = predict(config, in_process=True)[0]
            real = truth.peak(config, "dispatcher", steps=3, ahead=ahead.of(config))
            rows.append(((predicted - real) / real * 100, predicted, real, label))
    finally:
        torch.set_num_threads(threads)
    low, high = min(rows), max(rows)
    print(f"\n{task}: lowest {low[0]:+.2f} % ({low[3]}); highest {high[0]:+.2f} % ({high[3]})")
    assert all(error >= 0 for error, *_ in rows), f"under the truth: {[r for r in rows if r[0] < 0]}"
    assert all(error <= 10 for error, *_ in rows), f"more than 10 % over: {[r for r in rows if r[0] > 10]}"
