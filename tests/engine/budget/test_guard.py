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
    config = cfg.load(preset="demo", task="sensorlm", overrides={"train": {"device": "cpu", "batch_size": 512},
                                                               "budget": {"vram_gb": 0.25}})
    result = check_start(config, DeviceInfo())
    assert result.ok and result.capped_from == 512 and result.budget.reserve == 0
    assert result.summary()["predicted"] <= result.summary()["budget"]
