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


def test_cpu_steps_between_samples_do_not_predict_and_any_change_is_looked_at() -> None:
    from engine.budget import hook as hook_module

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
