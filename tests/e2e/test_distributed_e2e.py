"""A 2-rank job in a real terminal (tmux): the terminal dies, the job trains on, `attach` shows both ranks and
pauses them.

`sensorlm-tui train --nproc-per-node 2` runs in a tmux session; the session
is killed (a real SIGHUP, what an SSH drop does): the job keeps training
(torchrun runs in its own session), `attach` in a fresh tmux session shows
the rank table with both ranks and a pause sent from there lands on both
ranks at the same step. Every process the test started is killed in the end.
"""

from __future__ import annotations

import re
from pathlib import Path

import psutil
import pytest

from tests.conftest import holds_for, read_events, wait_until
from tests.e2e.tmux import Tmux, needs_tmux, paced, sensorlm, started_in
from tests.tui.attach.conftest import status_step

pytestmark = [needs_tmux, pytest.mark.e2e, pytest.mark.slow]

TRAIN = ["train", "--task", "toy", "--threads", "1", "--max-steps", "100000", "--nproc-per-node", "2",
         "--run-dir", "runs/job"]


def _job_processes(cwd: Path) -> list:
    """The supervisor and the rank workers started from ``cwd`` (each rank runs in a session of its own)."""
    return started_in(cwd, "engine.app.supervisor", "engine.app.rank_worker")


def _rank_rows(text: str) -> set[int]:
    """Ranks with a row in the rank table on screen (rank, step, then times in ms)."""
    return {int(m.group(1)) for m in re.finditer(r"(?:^|[\s│┃|])(\d)\s+\d+\s+\d+ms\s+\d+ms", text, re.M)}


def test_killed_terminal_leaves_a_two_rank_job_training_and_attach_takes_control(tmp_path: Path, tmux: Tmux) -> None:
    run = tmp_path / "runs" / "job"
    tmux.start("train", paced(sensorlm(*TRAIN)))
    try:
        wait_until(lambda: status_step(run) >= 5, 120, "the 2-rank job to train")
        tmux.kill("train")  # the terminal is gone: its processes get SIGHUP
        hung_up_at = status_step(run)
        wait_until(lambda: status_step(run) > hung_up_at + 20, 60, "training to go on after the hang-up")

        tmux.start("attach", sensorlm("attach", str(run)))  # 120x40: wide enough for the system panel's rank table
        text = tmux.wait_for("attach", lambda s: _rank_rows(s) >= {0, 1} and "rank peaks" in s, 60,
                             "both ranks' rows and their peaks")
        assert "rank" in text
        # Each rank's measured peak, against the per-rank prediction (not the one-process job's).
        assert re.search(r"rank peaks [\d.]+ · [\d.]+ [KMG]iB", text), text
        memory = [e for e in read_events(run) if e.get("type") == "memory"][-1]
        ranks = [e for e in read_events(run) if e.get("type") == "ranks"][-1]["ranks"]
        assert all(r["peak"] for r in ranks)
        assert abs(memory["predicted"] / ranks[0]["peak"] - 1) < 0.25, (memory, ranks)
        tmux.keys("attach", "Space")
        tmux.wait_for("attach", lambda s: "paused" in s.lower(), 30, "the pause shown")
        paused = next(e for e in read_events(run) if e.get("type") == "state" and e["state"] == "paused")
        held = status_step(run)
        # every rank holds (rank 0 could not step alone: DDP all-reduces)
        holds_for(lambda: status_step(run) == held, 1.5, "the paused job: no step", 0.2)
        landed = [e for e in read_events(run) if e.get("type") == "ranks" and e["reason"] == "control"]
        assert any([r["step"] for r in e["ranks"]] == [paused["step"]] * 2 for e in landed), landed
    finally:
        tmux.close()
        for proc in _job_processes(tmp_path):  # the job runs in its own session: nothing above reached it
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        wait_until(lambda: not _job_processes(tmp_path), 30, "the job's processes to be gone")
