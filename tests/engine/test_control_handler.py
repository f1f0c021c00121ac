"""The control handler's seams: what it asks of the run (``save_now``) and the actions it routes to the component
that owns them (autotune), each answered once, with the request's id."""

from __future__ import annotations

from engine.run.control.requests import Request
from engine.training.control_handler import ControlHandler


class _Run:
    """A run at step 3 whose saves write ``path`` (None: the write failed)."""

    step = 3

    def __init__(self, path: str | None) -> None:
        self.path, self.saved = path, []

    def save_now(self, request_id: str | None) -> str | None:
        self.saved.append(request_id)
        return self.path

    def settle(self) -> None:
        pass


def _handler(run: _Run, events: list) -> ControlHandler:
    return ControlHandler(controls=None, emit=events.append, run=run, settings=None, budget=None, prefetch=None,
                          device=None)


def test_checkpoint_now_saves_through_the_run_and_answers_with_the_path_or_the_failure() -> None:
    events: list = []
    run = _Run("/r/checkpoints/last.safetensors")
    _handler(run, events).apply([Request("checkpoint_now", id="c1")])
    failed = _Run(None)
    _handler(failed, events).apply([Request("checkpoint_now", id="c2")])
    assert run.saved == ["c1"] and failed.saved == ["c2"]
    assert [(e.type, e.request_id, e.step) for e in events] == [("setting", "c1", 3), ("refused", "c2", 3)]
    assert events[0].new == "/r/checkpoints/last.safetensors" and "checkpoint failed" in events[1].why


def test_an_action_goes_to_the_component_it_is_routed_to_and_is_unknown_until_then() -> None:
    events: list = []
    handler = _handler(_Run(None), events)
    handler.apply([Request("autotune", mode="start", id="a1")])
    assert [(e.type, e.request_id, e.why) for e in events] == [("refused", "a1", "unknown action 'autotune'")]
    routed: list = []
    handler.route("autotune", routed.append)
    handler.apply([Request("autotune", mode="cancel", id="a2")])
    assert [r.id for r in routed] == ["a2"] and len(events) == 1  # the component answers it, not the handler
