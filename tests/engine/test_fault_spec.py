"""The fault injector's spec (engine.training.faults): an ``lr@A-B=F`` item scales exactly those steps' LR, and a bad
item is one line naming the variable and the item."""

from __future__ import annotations

import pytest

from engine.training.faults import FaultInjector, FaultSpecError


def test_lr_item_scales_exactly_its_steps():
    injector = FaultInjector.parse("lr@7-9=100,nan@3")
    # lr_factor takes the loop's count of steps done: the step being computed is that plus one (1-based, as
    # the events number it).
    assert [injector.lr_factor(done) for done in range(5, 10)] == [1.0, 100.0, 100.0, 100.0, 1.0]
    assert injector.steps == {3: [("nan", False)]}


def test_slow_item_sleeps_each_loss_of_exactly_its_steps():
    import time

    injector = FaultInjector.parse("slow@3-4=0.05")
    assert injector.slow_steps == {3: 0.05, 4: 0.05}
    took = []
    for done in (1, 2, 2, 4):  # step 2 twice, as two micro-batches
        start = time.monotonic()
        injector.on_loss(done, 1.0)
        took.append(time.monotonic() - start)
    assert took[1] >= 0.05 and took[2] >= 0.05 and took[0] < 0.05 and took[3] < 0.05, took


@pytest.mark.parametrize("item", ["slow@3=-1", "slow@3=x", "slow@3=61", "slow@0=1"])
def test_bad_slow_item_is_one_line_naming_it(item):
    with pytest.raises(FaultSpecError) as info:
        FaultInjector.parse(item)
    message = str(info.value)
    assert message.startswith(f"SENSORLM_TUI_FAULTS: {item!r}") and "\n" not in message


@pytest.mark.parametrize("item", ["lr@7=0", "lr@7=x", "lr@7=inf", "lr@9-7=2", "lr@0=2"])
def test_bad_lr_item_is_one_line_naming_it(item):
    with pytest.raises(FaultSpecError) as info:
        FaultInjector.parse(item)
    message = str(info.value)
    assert message.startswith(f"SENSORLM_TUI_FAULTS: {item!r}") and "\n" not in message
