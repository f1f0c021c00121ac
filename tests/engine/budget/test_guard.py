"""The start guard: refuses with numbered options, --no-vram-check overrides, --vram-gb caps the batch."""

from __future__ import annotations

import re

from engine.budget import analytic
from engine.budget.guard import check_start
from engine.budget.measure import DeviceInfo
from engine.core import config as cfg

GIB = 1 << 30
H100 = DeviceInfo(type="cuda", name="H100", total=80 * GIB, free=79 * GIB, context=500 << 20)


def _base(**sections):
    return cfg.load(preset="base", task="sensorlm", overrides=sections)


def test_refuses_with_options_that_each_carry_numbers() -> None:
    result = check_start(_base(train={"batch_size": 256}), H100)
    assert not result.ok
    assert "does not fit" in result.message and "\n" not in result.message
    text = result.text()
    for flag in ("--batch-size", "--grad-accum", "--attn-backend", "--preset", "--vram-gb", "--no-vram-check"):
        assert flag in text, flag
    for option in result.options[:-1]:
        assert re.search(r"\d", option), option
    # The largest batch it names really fits, and one more does not.
    largest = int(re.search(r"--batch-size (\d+)", text).group(1))
    budget = result.budget.bytes
    config = _base(train={"batch_size": 256})
    assert analytic.estimate(config, batch_size=largest, device="cuda").total <= budget
    assert analytic.estimate(config, batch_size=largest + 1, device="cuda").total > budget


def test_no_vram_check_starts_anyway_and_says_it_does_not_fit() -> None:
    result = check_start(_base(train={"batch_size": 256}, budget={"check": False}), H100)
    assert result.ok and "does NOT fit" in result.message and "--no-vram-check" in result.message


def test_vram_gb_caps_the_batch_and_says_so() -> None:
    result = check_start(_base(train={"batch_size": 256}, budget={"vram_gb": 40}), None)
    assert result.ok and result.capped_from == 256
    capped = result.config.train.batch_size
    assert 1 <= capped < 256 and f"batch_size 256 → {capped}" in result.message
    assert result.estimate.total <= result.budget.bytes
    assert "--grad-accum" in result.message  # how to keep the effective batch instead


def test_vram_gb_too_small_for_batch_one_refuses() -> None:
    result = check_start(_base(budget={"vram_gb": 0.5}), None)
    assert not result.ok and any("--preset" in o or "--vram-gb" in o for o in result.options)


def test_cpu_without_a_budget_has_nothing_to_enforce() -> None:
    result = check_start(cfg.load(preset="demo", task="sensorlm"), DeviceInfo())
    assert result.ok and result.message.startswith("CPU: no device budget to enforce")


def test_cpu_with_vram_gb_enforces_it() -> None:
    config = cfg.load(preset="demo", task="sensorlm", overrides={"train": {"batch_size": 512},
                                                               "runtime": {"device": "cpu"},
                                                               "budget": {"vram_gb": 0.25}})
    result = check_start(config, DeviceInfo())
    assert result.ok and result.capped_from == 512 and result.budget.reserve == 0
    assert result.summary()["predicted"] <= result.summary()["budget"]


def _traced(factor: float, calls: list):
    from engine.core.estimate import Estimate

    def tracer(config):
        calls.append(config.train.batch_size)
        bound = analytic.estimate(config, device="cuda").total
        return Estimate(total=int(bound * factor), breakdown={}, upper_bound=False, source="trace")
    return tracer


def test_on_a_cuda_device_the_guard_takes_the_larger_of_the_bound_and_a_traced_step_and_says_when_they_differ():
    config = _base(train={"batch_size": 8})
    bound = analytic.estimate(config, device="cuda").total
    calls: list = []
    larger = check_start(config, H100, tracer=_traced(1.5, calls))
    assert calls == [8] and larger.ok
    assert abs(larger.estimate.total - bound * 1.5) <= 1e-6 * bound and "raised" in larger.estimate.source
    assert any("differ by more than 10%" in n and "the larger is used" in n for n in larger.notes), larger.notes
    close = check_start(config, H100, tracer=_traced(1.05, []))
    assert abs(close.estimate.total - bound * 1.05) <= 1e-6 * bound and not close.notes  # raised, nothing worth a note
    smaller = check_start(config, H100, tracer=_traced(0.7, []))
    assert smaller.estimate.total == bound and "differ" in smaller.notes[0]  # a bound is never lowered

    def broken(config):
        raise RuntimeError("trace failed: no kernel image")
    failed = check_start(config, H100, tracer=broken)
    assert failed.estimate.total == bound and failed.notes[0].startswith("no traced check on cuda")
    # under --vram-gb the cap uses the raised prediction too
    capped = check_start(_base(train={"batch_size": 64}, budget={"vram_gb": 16}), H100, tracer=_traced(2.0, []))
    assert capped.capped_from == 64 and capped.estimate.total <= capped.budget.bytes
    uncapped = check_start(_base(train={"batch_size": 64}, budget={"vram_gb": 16}), H100)
    assert capped.config.train.batch_size < uncapped.config.train.batch_size
    # no trace for a CPU run
    cpu_calls: list = []
    check_start(_base(train={"batch_size": 8}, runtime={"device": "cpu"}), DeviceInfo(total=64 * GIB, free=60 * GIB),
                tracer=_traced(2.0, cpu_calls))
    assert cpu_calls == []


def test_the_guard_prices_attention_for_the_devices_capability() -> None:
    lm = cfg.load(task="lm", preset="demo", overrides={"train": {"batch_size": 8}, "runtime": {"precision": "bf16"},
                                                       "lm": {"seq_len": 512}})
    t4 = DeviceInfo(type="cuda", name="T4", total=15 * GIB, free=14 * GIB, context=300 << 20, capability=(7, 5))
    h200 = DeviceInfo(type="cuda", name="H200", total=140 * GIB, free=139 * GIB, context=500 << 20,
                      capability=(9, 0))
    on_t4, on_h200 = check_start(lm, t4, tracer=_traced(1.0, [])), check_start(lm, h200, tracer=_traced(1.0, []))
    # bf16 with grouped-query heads: flash on sm 9.0 (no T×T kept), the math path on sm 7.5
    assert on_t4.estimate.total > on_h200.estimate.total + 2 * 8 * 4 * 512 * 512 * 4
