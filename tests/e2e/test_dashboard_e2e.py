"""The dashboard in a real terminal, as a new user meets it at 80×24: the real `sensorlm-tui` on the demo preset.

tmux starts it; the start-up phases show while they happen (before the engine has a run directory), the
progress panel keeps its throughput at 80 columns; space pauses (PAUSED, the step count stops) and resumes, c
checkpoints (in the log and on disk), then Ctrl-C stops the run gracefully: the process exits 0 with one line,
a final checkpoint matching the last step is on disk, and engine.log holds no C++ abort
("terminate called without an active exception"). A second test presses Ctrl-C while the engine is still
starting: the engine is stopped (130, nothing trained), never left running unseen.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from engine.run.rundir import RunDir
from tests.conftest import holds_for, read_events, wait_until
from tests.e2e.tmux import Tmux, needs_tmux, sensorlm, started_in

pytestmark = [needs_tmux, pytest.mark.e2e, pytest.mark.slow]

PHASES = ("reading the config", "importing torch", "predicting memory", "building data and model")


def _step(text: str) -> int:
    found = re.search(r"step (\d+)/(\d+)", text)
    return int(found.group(1)) if found else -1


def _engines(cwd: Path) -> list:
    """Engine processes started from ``cwd`` (the dashboard launches them in sessions of their own)."""
    return started_in(cwd, "-m engine")


def test_demo_phases_pause_resume_checkpoint_and_ctrl_c(tmp_path: Path, tmux: Tmux) -> None:
    # The demo preset as a newcomer runs it; fewer val windows and one thread keep the test short on 2 cores.
    run = tmp_path / "runs" / "demo"
    tmux.start("demo", sensorlm("train", "--preset", "demo", "--threads", "1", "--set", "sensorlm.data.val_samples=16",
                                "--max-steps", "100000", "--eval-every", "0", "--name", "demo"), size=(80, 24))
    seen = tmux.wait_for("demo", lambda s: any(f"… {p}" in s for p in PHASES) or _step(s) >= 0, 60,
                         "a start-up phase with its clock")
    assert any(f"… {p}" in seen for p in PHASES), f"a phase while it happens, not after it:\n{seen}"
    assert not (run / "events.jsonl").exists(), "shown before the engine had its event log"
    screen = tmux.wait_for("demo", lambda s: _step(s) >= 3 and "it/s" in s, 180, "steps with their rate")
    assert re.search(r"[\d.]+ it/s", screen), "the rate stays on screen at 80×24"
    engine_pid = RunDir(run).read_status()["pid"]

    tmux.keys("demo", "Space")
    paused = tmux.wait_for("demo", lambda s: "PAUSED" in s, 30, "the PAUSED badge")
    held = wait_until(lambda: [e for e in read_events(run) if e["type"] == "state" and e["state"] == "paused"], 30,
                      "the pause in the event log")[-1]["step"]
    before = _step(tmux.wait_for("demo", lambda s: _step(s) >= held, 30, f"the screen at the paused step {held}"))
    # the window is the behaviour: 2 s, long enough for several demo steps had the engine not stopped
    holds_for(lambda: "PAUSED" in (still := tmux.screen("demo")) and _step(still) == before, 2.0,
              "the step count stops while paused", 0.2)
    assert _step(paused) <= before

    tmux.keys("demo", "Space")
    tmux.wait_for("demo", lambda s: "RUNNING" in s and _step(s) > before, 60, "steps moving again")

    tmux.keys("demo", "c")
    tmux.wait_for("demo", lambda s: "checkpoint (manual)" in s, 30, "the checkpoint in the log")
    manual = [e for e in read_events(run) if e["type"] == "checkpoint" and e["kind"] == "manual"]
    assert manual, "the manual checkpoint is in events.jsonl"
    path = Path(manual[-1]["path"])
    assert (path if path.is_absolute() else tmp_path / path).is_file(), "and on disk"

    tmux.keys("demo", "C-c")  # Ctrl-C stops the run: a checkpoint, then one line
    text = tmux.wait_for("demo", lambda s: "EXIT=" in s, 120, "the app to exit after Ctrl-C")
    assert "EXIT=0" in text
    said = "".join(line.strip() for line in text.split("EXIT=")[0].strip().splitlines())
    assert said.startswith("demo: aborted at step ") and " · checkpoint " in said, said

    status = RunDir(run).read_status()
    assert status["exit_code"] == 0 and status["state"] == "aborted" and status["pid"] == engine_pid
    events = read_events(run)
    final = [e for e in events if e["type"] == "run_finished"][-1]
    last = [e for e in events if e["type"] == "checkpoint"][-1]
    assert last["step"] == final["steps"]
    path = Path(last["path"])
    assert (path if path.is_absolute() else tmp_path / path).is_file()
    log = (run / "engine.log").read_text()
    assert "terminate called" not in log, "a graceful stop ends every data worker cleanly:\n" + log[-2000:]


def test_ctrl_c_while_the_engine_starts_stops_it(tmp_path: Path, tmux: Tmux) -> None:
    tmux.start("start", sensorlm("train", "--preset", "demo", "--threads", "1", "--name", "early"), size=(80, 24))
    tmux.wait_for("start", lambda s: any(f"… {p}" in s for p in PHASES[1:]), 60, "the engine starting")
    tmux.keys("start", "C-c")
    text = tmux.wait_for("start", lambda s: "EXIT=" in s, 60, "the app to exit")
    assert "EXIT=130" in text
    said = "".join(text.split("EXIT=")[0].split())  # compared without whitespace: the terminal wraps anywhere
    assert said.startswith("early:stoppedtheenginewhile") and "nothingwastrained" in said, text
    deadline = time.monotonic() + 20
    while _engines(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _engines(tmp_path), "no engine left running unseen"
