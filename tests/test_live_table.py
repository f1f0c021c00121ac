"""Every view of the live settings is derived from the one table (engine.core.live_table), and each value is
checked once, at the engine's door.

A setting added to the table (here the AdamW weight decay, declared as moving
memory and with two values to try) shows up in the tune modal, passes the
control channel's form check and is judged by the engine's door, is judged by
the budget, and is one of autotune's dimensions, without a line of any view
naming it. Against the table as it ships, every one of those views says it
does not know the name.
"""

from __future__ import annotations

import asyncio

from engine.budget.settings import path_of, value_of, with_settings, written
from engine.core.config import validate
from engine.core.live_table import ENGINE, ENGINE_SETTINGS, LiveTable
from engine.core.registry import BUILTIN_SPECS, get_spec
from engine.core.taskspec import Setting
from engine.run.control.requests import Request
from engine.training.autotune_space import count_refused, dimensions
from engine.training.control_handler import ControlHandler
from engine.training.live_settings import LiveSettings

#: The setting added to the table: a real config field, so the budget and the config can hold it.
ADDED = Setting("weight_decay", "optimizer.weight_decay", "float", minimum=0, maximum=10, choices=(0.0, 0.1),
                label="weight decay", help="AdamW decoupled weight decay", applies="config", affects_data=False)
EXTENDED = LiveTable(ENGINE_SETTINGS + (ADDED,))
OUT_OF_RANGE = "weight_decay 11 is out of range; allowed: 0..10"


class _Budget:
    """The budget's side of a change: what it was asked to judge (everything fits)."""

    def __init__(self) -> None:
        self.judged: list[dict] = []

    def predict_change(self, changes: dict) -> dict:
        self.judged.append(dict(changes))
        return {"predicted": 1 << 20, "budget": 1 << 30, "fits": True, "why": ""}


class _Optim:
    peak_lr = 1e-3


class _Run:
    step = 7


def _toy() -> object:
    return validate({"task": {"name": "toy"}}, "test")


def _engine(table: LiveTable | None) -> tuple[ControlHandler, _Budget, list]:
    """The engine's handler and live settings of a toy run with ``table`` (None: the run's own)."""
    events: list = []
    budget = _Budget()
    settings = LiveSettings(_toy(), task=None, model=None, optim=_Optim(),
                            table=table.for_task(get_spec("toy").capabilities) if table else None)
    return ControlHandler(controls=None, emit=events.append, run=_Run(), settings=settings, budget=budget,
                          prefetch=None, device=None), budget, events


def _wire(name: str, value, rid: str) -> Request:
    """A set request as the control socket reads it."""
    return Request.from_dict({"v": 1, "id": rid, "action": "set", "name": name, "value": value})


def test_a_setting_added_to_the_table_is_checked_judged_and_applied_by_the_engine() -> None:
    handler, budget, events = _engine(EXTENDED)
    handler.apply([_wire("weight_decay", 11, "far"), _wire("weight_decay", "x", "text"),
                   _wire("weight_decay", 0, "zero")])
    assert [(e.type, e.request_id) for e in events] == [("refused", "far"), ("refused", "text"), ("setting", "zero")]
    assert events[0].why == OUT_OF_RANGE and events[1].why == "weight_decay must be a finite number in 0..10, got 'x'"
    # admitted in the setting's type (the wire's 0 is the float the config holds), judged by the budget, written
    assert budget.judged == [{"weight_decay": 0.0}] and type(events[2].new) is float
    assert handler.settings.config.optimizer.weight_decay == 0.0 and handler.settings.value("weight_decay") == 0.0
    shipped, _, said = _engine(None)
    shipped.apply([_wire("weight_decay", 0, "w")])
    assert said[0].type == "refused" and said[0].why.startswith("task 'toy' has no setting 'weight_decay'; settable: "
                                                                "batch_size, grad_accum, lr, threads, data_workers")


def test_a_setting_added_to_the_table_is_in_the_budgets_view_and_autotunes_space() -> None:
    config, run = _toy(), EXTENDED.for_task(get_spec("toy").capabilities)
    assert path_of(config, "weight_decay", run) == "optimizer.weight_decay" and run.affects_memory("weight_decay")
    assert value_of(with_settings(config, table=run, weight_decay=0.5), "weight_decay", run) == 0.5
    assert written(config, {"weight_decay": 0.1}, run).optimizer.weight_decay == 0.1
    current = {"grad_accum": 1, "threads": 0, "data_workers": -1, "weight_decay": 0.01}
    dims, _ = dimensions(run, [], 16, 2, current)
    assert [(d.name, d.values) for d in dims][-1] == ("weight_decay", (0.01, 0.0, 0.1))  # the value in force first
    assert [d.name for d in dims] == ["grad_accum", "threads", "data_workers", "weight_decay"]
    # it moves memory: each of its values is predicted (threads move none: predicted once for all their values)
    predicted: list[dict] = []
    count_refused(dims, current, lambda combo: predicted.append(combo) or True, run.affects_memory)
    assert sorted({c["weight_decay"] for c in predicted}) == [0.0, 0.01, 0.1]
    assert {c.get("threads", 0) for c in predicted} == {0}
    shipped = ENGINE.for_task(get_spec("toy").capabilities)
    assert "weight_decay" not in [d.name for d in dimensions(shipped, [], 16, 2, current)[0]]
    assert not shipped.affects_memory("weight_decay")


def test_a_setting_added_to_the_table_is_a_field_of_the_tune_modal_checked_by_the_same_words() -> None:
    from textual.app import App
    from textual.widgets import Input

    from tui.screens.tune import TuneScreen, tune_settings

    caps = get_spec("toy").capabilities
    assert [s.name for s in tune_settings(caps)] == ["batch_size", "grad_accum", "lr"]
    fields = tune_settings(caps, engine=EXTENDED)
    assert [s.name for s in fields] == ["batch_size", "grad_accum", "lr", "weight_decay"]
    current = {"batch_size": 16, "grad_accum": 1, "lr": 1e-3, "weight_decay": 0.01}
    modal = TuneScreen(current, fields, budget=1 << 30, link=None, may_apply=False, unavailable="a test")

    class Host(App):
        def on_mount(self) -> None:
            self.push_screen(modal)

    async def edit() -> tuple[str, str]:
        async with Host().run_test(size=(110, 40)) as pilot:
            await pilot.pause()
            label = str(modal.query_one("#tune-label-weight_decay").render())
            field = modal.query_one("#tune-weight_decay", Input)
            assert field.value == "0.01"
            field.value = "11"
            await pilot.pause()
            return label, str(modal.query_one("#tune-estimate").render())

    label, estimate = asyncio.run(edit())
    assert label == "weight decay 0..10"
    assert estimate == OUT_OF_RANGE  # the engine's refusal above, word for word: one check, the entry's


def test_the_door_bounds_grad_accum_by_the_batch_in_force_or_the_one_changed_with_it() -> None:
    """The run's state bounds a value too (the cores' bound on threads and data workers:
    tests/engine/test_live_bounds.py); a return to the value the run started with is admitted whatever the
    machine."""
    handler, _, events = _engine(None)
    handler.apply([Request("set", name="grad_accum", value=17, id="accum"),
                   Request("set", name="batch_size", value=64, together=(("grad_accum", 32),), id="pair")])
    assert events[0].why == "grad_accum 17 is out of range; allowed: 1..16 (at most the batch size)"
    assert [(e.type, e.name, e.new) for e in events[1:]] == [("setting", "grad_accum", 32),
                                                             ("setting", "batch_size", 64)]
    run = LiveSettings(validate({"task": {"name": "toy"}, "runtime": {"threads": 1024}}, "test"), None, None, None)
    assert run.admit({"threads": 1024}) == ({"threads": 1024}, None)  # what it started with, past the cores
    assert "out of range on this machine" in run.admit({"threads": 1023})[1]


def test_an_admitted_value_is_one_the_config_holds() -> None:
    """The door's check is the only one: a value it admits is written as it is, so every entry's bounds and
    choices, the engine's and each built-in task's, are values its config field accepts."""
    for task in BUILTIN_SPECS:
        config = validate({"task": {"name": task}}, "test")
        for setting in ENGINE.for_task(get_spec(task).capabilities).entries:
            edges = setting.choices if setting.kind == "choice" else (setting.minimum, setting.maximum)
            for value in edges:
                admitted, why = setting.admit(value)
                if why is None:  # an exclusive minimum (the LR's 0) is not admitted
                    assert value_of(with_settings(config, **{setting.name: admitted}), setting.name) == admitted
            if setting.kind != "choice":
                assert setting.check(setting.maximum + 1) is not None, setting.name
