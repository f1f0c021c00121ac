"""BudgetHook as the Trainer uses it: start summary, live-change checks with numbers, CPU budget and samples."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from engine.budget.hook import BudgetHook
from tests.engine.budget.conftest import small


def _hook(**budget):
    config = small(train={"batch_size": 4}, runtime={"device": "cpu"}, budget=budget)
    hook = BudgetHook(config, task=None, device=torch.device("cpu"))
    trainer = SimpleNamespace(config=config, batch_size=4, grad_accum=1)
    return hook, trainer


def test_on_start_summarises_prediction_and_budget() -> None:
    hook, trainer = _hook(vram_gb=0.05)
    summary = hook.on_start(trainer)
    assert summary.predicted > 0 and summary.source == "analytic" and summary.budget > 0
    assert summary.device == "cpu" and summary.largest_batch >= 4 and summary.breakdown
    # Typed end to end: RunStarted carries it, and it reads back from JSON as the same object.
    from engine.run import events as ev

    started = ev.from_json(ev.to_json(ev.RunStarted(budget=summary)))
    assert started.budget == summary


def test_check_change_refuses_with_numbers_and_force_overrides() -> None:
    hook, trainer = _hook(vram_gb=0.05)
    largest = hook.on_start(trainer).largest_batch
    assert hook.check_change({"batch_size": largest}, force=False) is None
    why = hook.check_change({"batch_size": 100 * largest}, force=False)
    assert why and ("GiB" in why or "MiB" in why) and f"batch_size 4 → {100 * largest}" in why and str(largest) in why
    assert hook.check_change({"batch_size": 100 * largest}, force=True) is None
    assert hook.check_change({"attn_backend": "math"}, force=False) is None
    trainer.batch_size = largest  # the trainer changed: the hook reads its live settings
    assert hook.check_change({"attn_backend": "math"}, force=False) is not None


def test_cpu_budget_is_available_ram_and_samples_carry_rss() -> None:
    hook, trainer = _hook()
    summary = hook.on_start(trainer)
    assert summary.budget > 0 and summary.budget_source == "available RAM"
    assert "RAM" in hook.check_change({"batch_size": 1_000_000}, force=False)  # would not fit in RAM (nor the machine)
    assert hook.check_change({"batch_size": 8}, force=False) is None
    first = hook.sample(1)
    assert first.predicted == summary.predicted and first.allocated is None and first.peak is None
    assert first.rss > 0 and first.budget == summary.budget and "no step counted yet" in first.source
    assert hook.sample(2) is None  # nothing new on CPU (this stand-in trainer has no model: no step counted)
    trainer.batch_size = 8
    assert hook.sample(3).predicted > first.predicted


def test_live_predictions_are_made_for_the_runs_layout_across_ranks() -> None:
    """The Trainer hands the hook its live settings, not itself: the strategy must come through the constructor,
    or a DDP run's live checks (a set, autotune's filter) predict one plain process's peak (no gradient buckets,
    the whole batch) until a measurement calibrates them."""
    from engine.distributed.parallel import Single

    class TwoRanks(Single):
        strategy = "ddp"

    config = small(train={"batch_size": 8}, runtime={"device": "cpu"}, budget={"vram_gb": 0.05})
    one, two = (BudgetHook(config, task=None, device=torch.device("cpu"), parallel=p) for p in (None, TwoRanks(0, 2)))
    trainer = SimpleNamespace(config=config, batch_size=8, grad_accum=1)
    assert one.on_start(trainer).predicted != two.on_start(trainer).predicted
    assert one.peak_for({"batch_size": 16})[0] != two.peak_for({"batch_size": 16})[0]


def test_cpu_steps_between_samples_do_not_predict_and_any_change_is_looked_at(monkeypatch) -> None:
    from engine.budget import hook as hook_module

    monkeypatch.setattr(hook_module, "CPU_SAMPLE_MIN_S", 0.0)  # (the floor in seconds: the next test)
    hook, trainer = _hook()
    hook.on_start(trainer)
    predictions = []
    real = hook._predict
    hook._predict = lambda config: predictions.append(config) or real(config)
    assert hook.sample(1) is not None and len(predictions) == 1
    assert all(hook.sample(step) is None for step in range(2, hook_module.CPU_EVERY))
    assert len(predictions) == 1  # nothing changed: the steps in between cost no prediction
    assert hook.sample(hook_module.CPU_EVERY) is not None and len(predictions) == 2  # the periodic sample
    trainer.config = trainer.config.model_copy()  # a new settings object, the same numbers: looked at, not sent
    assert hook.sample(hook_module.CPU_EVERY + 1) is None and len(predictions) == 3
    trainer.grad_accum = 2  # a live change: looked at, and the next step is counted for its new peak
    hook.sample(hook_module.CPU_EVERY + 2)
    assert len(predictions) == 4


def test_cpu_samples_with_nothing_new_wait_for_the_floor_in_seconds_and_a_held_count_follows_it(monkeypatch) -> None:
    """A fast CPU run (1,000 steps/s) would log a sample every CPU_EVERY steps, ten a second: with nothing
    new, one waits CPU_SAMPLE_MIN_S since the last. A count that found a new peak, and a change, go out at once;
    a count of the same peak held back goes out at the first step past the floor, carrying it."""
    from engine.budget import hook as hook_module

    clock = [100.0]
    monkeypatch.setattr(hook_module.time, "monotonic", lambda: clock[0])
    every = hook_module.CPU_EVERY
    counted = every + 7  # a counted step that is not a 100th
    monkeypatch.setattr(hook_module, "CPU_MEASURE_EVERY", counted)
    hook, trainer = _hook()
    trainer.model = torch.nn.Linear(64, 64)
    hook.on_start(trainer)

    def count(step: int) -> None:
        with hook.measure_step(step):
            trainer.model(torch.ones(256, 64)).sum()

    assert hook.sample(1) is not None  # the first
    clock[0] += hook_module.CPU_SAMPLE_MIN_S / 4
    assert hook.sample(every) is None  # periodic, but within the floor
    count(counted)
    first = hook.sample(counted)  # a new peak: at once
    assert first is not None and first.peak == hook.last_peak >= 256 * 64 * 4
    clock[0] += hook_module.CPU_SAMPLE_MIN_S / 4
    count(2 * counted)  # the same peak again, within the floor: held
    assert hook.last_peak == first.peak and hook.sample(2 * counted) is None and hook.sample(2 * counted + 1) is None
    clock[0] += hook_module.CPU_SAMPLE_MIN_S
    held = hook.sample(2 * counted + 2)  # past the floor: the held count goes out at once, not at a 100th step
    assert held is not None and held.peak == first.peak and held.step == 2 * counted + 2
    assert hook.sample(3 * every) is None  # sent: nothing new, within the floor
    trainer.batch_size = 8  # a live change: news at once, floor or not
    changed = hook.sample(3 * every + 1)
    assert changed is not None and changed.predicted != held.predicted
    clock[0] += hook_module.CPU_SAMPLE_MIN_S
    assert hook.sample(4 * every) is not None  # periodic past the floor
