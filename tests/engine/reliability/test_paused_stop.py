"""A paused engine still stops for every stop reason: SIGTERM, and a graceful abort from a second viewer.

Before the fix the paused loop only woke for abort-now, so a scheduler's
SIGTERM-then-SIGKILL after a pause lost every step since the last checkpoint.
A graceful stop while paused checkpoints at the paused step first.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from engine.run.control.client import RunClient
from engine.run.control.requests import abort, pause
from tests.conftest import holds_for
from tests.engine.reliability.harness import TOY, events_of

LONG = [*TOY, "--max-steps", "100000", "--eval-every", "0", "--checkpoint-every", "1000"]


def _paused(engines, tmp_path: Path):
    run = tmp_path / "run"
    engine = engines.spawn([*LONG, "--run-dir", str(run)], tmp_path)
    engine.wait_for(r"^step\s+5/")
    viewer = RunClient(run)
    ack = viewer.send(pause(), timeout=10)
    viewer.close()
    assert ack.type == "setting" and ack.new == "paused", ack
    holds_for(lambda: engine.last_step() <= ack.step, 0.5, "paused for a while: no further steps")
    return engine, run, ack.step


def _checkpointed_at(run: Path, step: int) -> None:
    from engine.checkpoint import store

    finished = events_of(run, "run_finished")[-1]
    assert finished["steps"] == step and finished["checkpoint"].endswith("last.safetensors")
    assert store.load_latest(run / "checkpoints").meta["step"] == step


def test_sigterm_while_paused_checkpoints_at_the_paused_step(engines, tmp_path: Path) -> None:
    engine, run, step = _paused(engines, tmp_path)
    engine.signal(signal.SIGTERM)
    assert engine.wait(10) == 130, engine.stderr()
    _checkpointed_at(run, step)


def test_graceful_abort_from_a_second_viewer_while_paused(engines, tmp_path: Path) -> None:
    engine, run, step = _paused(engines, tmp_path)
    started = time.monotonic()
    second = RunClient(run)
    ack = second.send(abort("graceful"), timeout=5)
    second.close()
    assert ack.type == "setting" and ack.new == "aborting", ack
    assert engine.wait(5) == 0, engine.stderr()
    assert time.monotonic() - started < 5
    _checkpointed_at(run, step)
