"""events.to_json: the msgspec fast path and the json fallback write the same records."""

from __future__ import annotations

import json
from pathlib import Path

from engine.run import events as ev


def test_finite_event_round_trips_and_keeps_the_line_shape():
    event = ev.StepLogged(step=3, epoch=1, loss=0.25, lr=1e-5, grad_norm=0.5, samples_per_s=12.5,
                          steps_per_s=1.5, batch_size=8, components={"mse": 1e-7})
    line = ev.to_json(event)
    assert line.startswith('{"type":"step","t":')  # the history reader's prefix; t first, as asdict orders it
    assert list(json.loads(line)) == ["type", *(f for f in event.to_dict() if f != "type")]
    assert ev.from_json(line) == event
    assert json.loads(line) == json.loads(json.dumps(event.to_dict()))


def test_non_finite_values_still_travel_as_strings():
    event = ev.StepLogged(step=1, loss=float("nan"), grad_norm=float("inf"), components={"mse": float("-inf")})
    record = json.loads(ev.to_json(event))
    assert (record["loss"], record["grad_norm"], record["components"]["mse"]) == ("nan", "inf", "-inf")
    back = ev.from_json(ev.to_json(event))
    assert back.grad_norm == float("inf") and back.loss != back.loss


def test_values_msgspec_cannot_encode_fall_back_to_str():
    event = ev.Warning(text="x", step=1)
    object.__setattr__(event, "text", Path("/tmp/a"))  # a sink may be handed a Path where a str is declared
    assert json.loads(ev.to_json(event))["text"] == "/tmp/a"
