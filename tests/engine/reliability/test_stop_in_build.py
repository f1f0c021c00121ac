"""The first SIGINT stops within 2 s even while a step's batch is built.

A forced `batch_size` far past what the box builds quickly (toy: ~0.5 ms a sample here, so 20,000 samples are
~10 s of Python) kept the first Ctrl-C waiting for a step boundary the build did not reach for over 10 s. The
signal now gives the step up while its first batch is built (engine.app.signals, engine.training.loop): the
checkpoint holds the step before it, exactly, and the engine exits 130 at once.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from engine.run.control.client import RunClient
from engine.run.control.requests import set_value
from tests.engine.reliability.harness import TOY, events_of, verify_all

LONG = [*TOY, "--max-steps", "100000", "--eval-every", "0", "--checkpoint-every", "1000"]
HUGE = 20_000


def test_the_first_sigint_stops_within_2_s_inside_a_huge_batch_build(engines, tmp_path: Path) -> None:
    run = tmp_path / "run"
    engine = engines.spawn([*LONG, "--run-dir", str(run)], tmp_path)
    engine.wait_for(r"^step\s+3/")
    ack = RunClient(run).send(set_value("batch_size", HUGE, force=True), timeout=30)
    assert ack.type == "setting" and ack.new == HUGE, ack
    # Not a wait for a condition: the build has no outside sign. The signal is meant to land inside it, and the
    # next step's first batch takes seconds to build, so half a second after the ack is well inside.
    time.sleep(0.5)
    sent = time.monotonic()
    engine.signal(signal.SIGINT)
    code = engine.wait(60)
    took = time.monotonic() - sent
    assert code == 130, engine.stderr()
    assert took < 2.0, f"the first SIGINT took {took:.1f} s to stop the engine"
    finished = events_of(run, "run_finished")[-1]
    assert (finished["reason"], finished["steps"]) == ("SIGINT: checkpointed and stopped", ack.step)
    saved = events_of(run, "checkpoint")[-1]
    assert (saved["step"], saved["kind"]) == (ack.step, "final")
    assert not [e for e in events_of(run, "step") if e["step"] > ack.step], "the given-up step was never logged"
    assert set(verify_all(run / "checkpoints").values()) == {"ok"} and engine.stderr() == ""
