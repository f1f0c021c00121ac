"""Every live setting has bounds; the engine refuses a value outside them in one line, with a Refused event.

The requests go through the engine's own ControlHandler and LiveSettings (the
code a socket request, an in-process viewer and the OOM policy all reach), so
a request that skipped the wire's type check (an in-process Request with a NaN)
is refused too. The run's other state is never touched by a refusal.
"""

from __future__ import annotations

import json

import pytest

from engine.core.config import validate
from engine.core.live_table import ENGINE_SETTINGS
from engine.core.registry import BUILTIN_SPECS, get_spec
from engine.core.taskspec import Setting
from engine.run.control.requests import Request, RequestError
from engine.training.control_handler import ControlHandler
from engine.training.live_settings import LiveSettings


class _Budget:
    def predict_change(self, change):  # only reached by a value that passed the bounds
        return {"predicted": 1, "budget": 2, "fits": True, "why": ""}


class _Optim:
    peak_lr = 1e-3


class _Run:
    step = 7


def _handler(task: str, events: list) -> ControlHandler:
    """The engine's handler and live settings of a ``task`` run, on a run at step 7 and a budget that fits all
    (no batch source or device: a refused value and the LR reach neither)."""
    settings = LiveSettings(validate({"task": {"name": task}}, "test"), task=None, model=None, optim=_Optim())
    return ControlHandler(controls=None, emit=events.append, run=_Run(), settings=settings, budget=_Budget(),
                          prefetch=None, device=None)


def _answers(task: str, *requests: Request) -> list:
    events: list = []
    _handler(task, events).apply(list(requests))
    return events


@pytest.mark.parametrize("name, value, says", [
    ("lr", 1e308, "lr 1e+308 is out of range; allowed: >0..10"),
    ("lr", 0.0, "lr 0 is out of range; allowed: >0..10"),
    ("lr", float("nan"), "lr must be a finite number in >0..10, got nan"),
    ("lr", float("inf"), "lr must be a finite number in >0..10, got inf"),
    ("batch_size", 0, "batch_size 0 is out of range; allowed: 1..1000000"),
    ("batch_size", 10**12, "batch_size 1000000000000 is out of range; allowed: 1..1000000"),
    ("grad_accum", 17, "grad_accum 17 is out of range; allowed: 1..16 (at most the batch size)"),
    ("grad_accum", 5000, "grad_accum 5000 is out of range; allowed: 1..4096"),
])
def test_the_engines_own_settings_refuse_out_of_range_values(name, value, says) -> None:
    (event,) = _answers("toy", Request("set", name=name, value=value, id="r1"))
    assert event.type == "refused" and event.why == says and event.request_id == "r1" and "\n" not in event.why


def test_a_tasks_declared_bounds_refuse_a_negative_chunk_and_nan() -> None:
    chunk, nan_chunk, seq = (Request("set", name="attn_chunk", value=-4, id="a"),
                             Request("set", name="attn_chunk", value=float("nan"), id="b"),
                             Request("set", name="seq_len", value=4, id="c"))
    first, second = _answers("sensorlm", chunk, nan_chunk)
    assert first.why == "attn_chunk -4 is out of range; allowed: 1..65536"
    assert second.why == "attn_chunk must be an integer in 1..65536, got nan"
    (third,) = _answers("lm", seq)
    assert third.why == "seq_len 4 is out of range; allowed: 8..1048576"
    assert {e.type for e in (first, second, third)} == {"refused"}


def test_a_value_in_range_reaches_the_budget_and_is_applied() -> None:
    events: list = []
    handler = _handler("toy", events)
    handler.apply([Request("set", name="lr", value=10.0)])
    assert events[0].type == "setting" and handler.settings.optim.peak_lr == 10.0


def test_nan_on_the_wire_is_refused_before_it_reaches_the_engine() -> None:
    for name in ("lr", "attn_chunk", "batch_size"):
        with pytest.raises(RequestError, match=f"{name} must be"):
            Request.from_dict(json.loads(f'{{"v": 1, "id": "x", "action": "set", "name": "{name}", "value": NaN}}'))


def test_an_integer_past_floats_range_from_the_wire_is_refused_in_one_line() -> None:
    """JSON reads 400 digits as a Python int, which float() cannot hold: the bound check raised OverflowError
    in the training thread, which is not a refusal."""
    digits = "1" + "0" * 400
    requests = [Request.from_dict(json.loads(f'{{"v": 1, "id": "{name}", "action": "set", "name": "{name}", '
                                             f'"value": {digits}}}')) for name in ("batch_size", "lr")]
    events = _answers("toy", *requests)
    assert [(e.type, e.why) for e in events] == [
        ("refused", "batch_size 1.000e+400 is out of range; allowed: 1..1000000"),
        ("refused", "lr 1.000e+400 is out of range; allowed: >0..10")]


def test_every_engine_and_built_in_task_setting_declares_finite_bounds() -> None:
    declared = [*ENGINE_SETTINGS, *(s for name in BUILTIN_SPECS for s in get_spec(name).capabilities.settings)]
    assert [s.declaration_error() for s in declared] == [None] * len(declared)
    by_name = {s.name: s for s in ENGINE_SETTINGS}
    assert (by_name["lr"].range_text(), by_name["batch_size"].range_text()) == (">0..10", "1..1000000")
    assert Setting("window", "x.window", "int", minimum=1).declaration_error() == \
        "setting 'window': kind 'int' needs a finite minimum and maximum, got (1, None)"


class _Source:
    """The batch source's side of a threads / data workers change: what reached it."""

    def __init__(self) -> None:
        self.overrides: list[dict] = []

    def override(self, **change) -> None:
        self.overrides.append(change)


def test_live_threads_and_data_workers_past_the_cores_are_refused_naming_the_bound() -> None:
    """`set data_workers=64` and `set threads=1024` on 2 cores were applied without a word."""
    from engine.training.threads import usable_cores

    cores = usable_cores()
    events: list = []
    settings = LiveSettings(validate({"task": {"name": "toy"}}, "test"), task=None, model=None, optim=_Optim())
    source = _Source()
    handler = ControlHandler(controls=None, emit=events.append, run=_Run(), settings=settings, budget=_Budget(),
                             prefetch=source, device=None)
    over = {"threads": max(1024 if cores.usable < 1024 else 0, cores.usable + 1),
            "data_workers": max(64 if cores.usable < 64 else 0, cores.usable + 1)}
    handler.apply([Request("set", name=name, value=value, id=name) for name, value in over.items()])
    assert [e.type for e in events] == ["refused", "refused"] and source.overrides == []
    low = {"threads": 0, "data_workers": -1}
    assert [e.why for e in events] == [
        f"{name} {value} is out of range on this machine; allowed: {low[name]}..{cores.usable} (one per usable "
        f"core: {cores.describe()})" for name, value in over.items()]
    handler.apply([Request("set", name="threads", value=cores.usable), Request("set", name="data_workers", value=1)])
    assert [e.type for e in events[2:]] == ["setting", "setting"]
    assert source.overrides == [{"threads": cores.usable}, {"data_workers": 1}]
