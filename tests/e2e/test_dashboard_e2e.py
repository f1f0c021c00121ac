"""The dashboard end to end: the real `sensorlm-tui` on the demo preset in a real terminal.

tmux starts it, the test waits for steps, presses space (PAUSED, the step count stops), space again
(it moves), c (the checkpoint appears in the log and on disk), then a → g (graceful abort): the process
exits 0 and a final checkpoint matching the last step is on disk.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from engine.run.rundir import RunDir
from tests.conftest import read_events
from tests.e2e.tmux import Tmux, needs_tmux, sensorlm

pytestmark = [needs_tmux, pytest.mark.e2e]


def _step(text: str) -> int:
    found = re.search(r"step (\d+)/(\d+)", text)
    return int(found.group(1)) if found else -1


def test_demo_pause_resume_checkpoint_abort(tmp_path: Path, tmux: Tmux) -> None:
    # The demo preset as a newcomer runs it; fewer val windows and one thread keep the test short on 2 cores.
    tmux.start("demo", sensorlm("train", "--preset", "demo", "--threads", "1", "--set", "sensorlm.data.val_samples=16",
                                "--max-steps", "100000", "--eval-every", "0"))
    tmux.wait_for("demo", lambda s: _step(s) >= 3, 180, "the dashboard showing training steps")
    run = next(p for p in (tmp_path / "runs").iterdir() if p.is_dir())
    engine_pid = RunDir(run).read_status()["pid"]

    tmux.keys("demo", "Space")
    paused = tmux.wait_for("demo", lambda s: "PAUSED" in s, 30, "the PAUSED badge")
    time.sleep(2.0)  # long enough for several demo steps, had the engine not stopped
    before = _step(tmux.screen("demo"))
    time.sleep(2.0)
    still = tmux.screen("demo")
    assert "PAUSED" in still and _step(still) == before, "the step count stops while paused"
    assert _step(paused) <= before

    tmux.keys("demo", "Space")
    tmux.wait_for("demo", lambda s: "RUNNING" in s and _step(s) > before, 60, "steps moving again")

    tmux.keys("demo", "c")
    tmux.wait_for("demo", lambda s: "checkpoint (manual)" in s, 30, "the checkpoint in the log")
    manual = [e for e in read_events(run) if e["type"] == "checkpoint" and e["kind"] == "manual"]
    assert manual, "the manual checkpoint is in events.jsonl"
    path = Path(manual[-1]["path"])
    assert (path if path.is_absolute() else tmp_path / path).is_file(), "and on disk"

    tmux.keys("demo", "a")
    tmux.wait_for("demo", lambda s: "graceful" in s, 20, "the abort modal")
    tmux.keys("demo", "g")
    text = tmux.wait_for("demo", lambda s: "EXIT=" in s, 120, "the app to exit after the abort")
    assert "EXIT=0" in text

    status = RunDir(run).read_status()
    assert status["exit_code"] == 0 and status["state"] == "aborted" and status["pid"] == engine_pid
    events = read_events(run)
    final = [e for e in events if e["type"] == "run_finished"][-1]
    last = [e for e in events if e["type"] == "checkpoint"][-1]
    assert last["step"] == final["steps"]
    path = Path(last["path"])
    assert (path if path.is_absolute() else tmp_path / path).is_file()
