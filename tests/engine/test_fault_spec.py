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


@pytest.mark.parametrize("item", ["lr@7=0", "lr@7=x", "lr@7=inf", "lr@9-7=2", "lr@0=2"])
def test_bad_lr_item_is_one_line_naming_it(item):
    with pytest.raises(FaultSpecError) as info:
        FaultInjector.parse(item)
    message = str(info.value)
    assert message.startswith(f"SENSORLM_TUI_FAULTS: {item!r}") and "\n" not in message
