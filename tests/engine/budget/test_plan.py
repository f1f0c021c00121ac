"""Planner: the largest batch fits (traced) and one more does not; recommendations follow the speed order."""

from __future__ import annotations

from engine.budget import analytic, plan
from engine.budget.settings import with_settings
from engine.budget.trace_worker import trace as trace_in_process
from engine.core.config import load
from tests.engine.budget.conftest import small


def test_largest_batch_fits_when_traced_and_one_more_does_not() -> None:
    config = small("toy", runtime={"device": "cpu"})
    budget = plan.Budget(bytes=40 << 20, total=40 << 20, safety=1.0, source="test")
    largest = plan.largest_batch(lambda **kw: analytic.estimate(config, device="cpu", **kw), budget.bytes)
    assert largest > 1
    fits = trace_in_process(with_settings(config, batch_size=largest), "cpu")["peak"]
    over = trace_in_process(with_settings(config, batch_size=largest + 1), "cpu")["peak"]
    assert fits <= budget.bytes < over


def test_largest_batch_agrees_with_a_linear_scan() -> None:
    config = load(preset="tiny", task="sensorlm")
    predict = plan.predictor_for(config, "cuda")
    budget = predict(batch_size=37).total + 1
    assert plan.largest_batch(predict, budget) == 37
    assert plan.largest_batch(predict, predict(batch_size=1).total - 1) == 0


def test_recommends_the_fastest_setting_that_fits() -> None:
    config = load(preset="base", task="sensorlm", overrides={"train": {"batch_size": 8},
                                                             "budget": {"vram_gb": 80}})
    p = plan.make_plan(config, plan.resolve_budget(config, None))
    assert p.recommended.settings == {"activation_checkpointing": False, "attn_backend": "sdpa"}
    by = {(o.get("attn_backend"), o.get("attn_chunk"), o.get("activation_checkpointing")): o for o in p.options}
    assert ("chunked", 256, False) in by and ("sdpa", 256, False) not in by  # a chunk only varies when chunking
    assert p.recommended.flags() == "--activation-checkpointing false --attn-backend sdpa"
    assert by[("math", None, False)].largest_batch < by[("sdpa", None, False)].largest_batch
    assert by[("sdpa", None, True)].largest_batch > by[("sdpa", None, False)].largest_batch


def test_when_nothing_fits_it_keeps_the_effective_batch_with_accumulation() -> None:
    config = load(preset="base", task="sensorlm", overrides={"train": {"batch_size": 4096},
                                                             "budget": {"vram_gb": 80}})
    p = plan.make_plan(config, plan.resolve_budget(config, None))
    assert not any(o.fits for o in p.options)
    assert p.recommended_batch == 4096 and p.recommended_grad_accum > 1
    micro = -(-4096 // p.recommended_grad_accum)
    assert micro <= p.recommended.largest_batch


def test_no_budget_means_estimates_only() -> None:
    config = load(preset="demo", task="sensorlm", overrides={"runtime": {"device": "cpu"}})
    p = plan.make_plan(config, plan.resolve_budget(config, None), device="cpu")
    assert p.budget is None and not p.options and "no budget" in p.note and p.estimate.total > 0
