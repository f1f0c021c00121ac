"""Lightning's DDP on two CPU processes (gloo) with the cockpit's callback: a pause lands on both ranks at one step.

Rank 0 owns the run directory; rank 1 only takes part in the agreement at each boundary (Lightning's
strategy broadcast). Where a control lands, every rank's step is gathered into a ``ranks`` event, so the
log itself shows both ranks stopped at the same step; a graceful abort then ends both with exit 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.run import events as ev
from engine.run.control import requests as rq
from engine.run.steps import open_record
from tests.integrations.conftest import holds_for, kinds, log_steps, read_events, send, status_step, wait_until

pytestmark = pytest.mark.slow


def test_a_pause_lands_on_both_ranks_at_one_step(tmp_path: Path, started_scripts) -> None:
    run = tmp_path / "runs" / "ddp"
    proc = started_scripts("lightning_run.py", str(run), "--devices", "2", "--steps", "100000", "--step-s", "0.02",
                           "--val-every", "100000", log=tmp_path / "ddp.out")
    wait_until(lambda: status_step(run) >= 5, 240, "both ranks training")
    started = kinds(run, "run_started")[0]
    assert started["config"]["train"]["world_size"] == 2 and not list(run.glob("ranks*"))

    ack = send(run, rq.pause())
    assert isinstance(ack, ev.SettingChanged) and ack.new == "paused"
    landed = wait_until(lambda: kinds(run, "ranks"), 30, "the ranks event of the pause")[0]
    assert landed["reason"] == "control" and [r["rank"] for r in landed["ranks"]] == [0, 1]
    assert {r["step"] for r in landed["ranks"]} == {ack.step}  # both ranks at the step the pause landed on
    assert len({r["pid"] for r in landed["ranks"]}) == 2
    held = status_step(run)
    holds_for(lambda: status_step(run) == held, 1, "both paused ranks: no step", 0.2)
    assert held == ack.step

    assert isinstance(send(run, rq.resume()), ev.SettingChanged)
    wait_until(lambda: status_step(run) > held + 3, 60, "both ranks training again")
    resumed = kinds(run, "ranks")[1]
    assert {r["step"] for r in resumed["ranks"]} == {held}  # resumed together from the same step

    assert isinstance(send(run, rq.abort()), ev.SettingChanged)
    assert proc.wait(120) == 0
    final = [e for e in kinds(run, "checkpoint") if e["kind"] == "final"]
    assert len(final) == 1 and Path(final[0]["path"]).is_file()
    assert read_events(run)[-1]["status"] == "aborted"
    recorded, lines = open_record(run).steps().tolist(), log_steps(run)  # the log: a step line a second
    assert set(lines) <= set(recorded) and lines[0] == recorded[0], (lines, recorded)  # rank 0's record
