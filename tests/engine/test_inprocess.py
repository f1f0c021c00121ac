"""InProcessSession: the Trainer in a thread behind the Session interface, acks round-trip."""

from __future__ import annotations

import time
from pathlib import Path

from engine.app.inprocess import InProcessSession
from engine.app.prepare import prepare
from engine.core.cli_args import OneLineParser, add_train_arguments
from engine.run.control import requests as control


def _prepared(tmp_path: Path, *flags: str):
    parser = OneLineParser(prog="t")
    add_train_arguments(parser)
    return prepare(parser.parse_args(["--task", "toy", "--threads", "1", "--run-dir", str(tmp_path / "r"), *flags]))


def _wait_for(session, predicate, timeout=30.0):
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen += session.poll(0.1)
        if predicate(seen):
            return seen
    raise AssertionError(f"condition not met; last events: {[e.type for e in seen[-5:]]}")


def test_pause_resume_refuse_abort_round_trip(tmp_path: Path) -> None:
    session = InProcessSession(_prepared(tmp_path, "--max-steps", "100000", "--eval-every", "0"))
    _wait_for(session, lambda evs: sum(e.type == "step" for e in evs) >= 5)
    ack = session.send(control.pause())
    assert ack.type == "setting" and ack.new == "paused"
    # Every step before the pause is in the events ahead of its ack (the sink keeps their order): drain to it.
    _wait_for(session, lambda evs: any(getattr(e, "request_id", None) == ack.request_id for e in evs))
    paused_events = session.poll(0.6)  # the window is the behaviour: 0.6 s paused, no step in it
    assert not [e for e in paused_events if e.type == "step"], "no steps while paused"
    assert session.send(control.resume()).new == "running"
    refused = session.send(control.set_value("attn_backend", "math"))
    assert refused.type == "refused" and "has no setting 'attn_backend'" in refused.why
    absurd = session.send(control.set_value("lr", 1e308))
    assert absurd.type == "refused" and absurd.why == "lr 1e+308 is out of range; allowed: >0..10"
    assert session.send(control.set_value("batch_size", 8)).new == 8
    steps = _wait_for(session, lambda evs: any(e.type == "step" and e.batch_size == 8 for e in evs))
    assert any(e.type == "step" for e in steps)
    session.send(control.abort("graceful"))
    assert session.wait(30) == 0
    assert session.liveness() == "aborted"
    assert (tmp_path / "r" / "checkpoints" / "last.safetensors").is_file()
