"""The real app in a real terminal (tmux): a hang-up detaches, `attach` picks the run up, abort ends it cleanly.

`sensorlm-tui train` in tmux, the tmux session
killed (the viewer gets a real SIGHUP), `sensorlm-tui attach` in a fresh
session shows the run still advancing, a graceful abort from there stops the
engine with exit 0 and a final checkpoint on disk. And the in-process
counterpart: there a hang-up checkpoints and stops the run, and says so.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import psutil
import pytest

from engine.run.rundir import RunDir, pid_alive
from tests.conftest import read_events, wait_until
from tests.e2e.tmux import Tmux, needs_tmux, paced, sensorlm
from tests.tui.attach.conftest import status_step

pytestmark = [needs_tmux, pytest.mark.e2e, pytest.mark.slow]

TRAIN = ["train", "--task", "toy", "--threads", "1", "--max-steps", "100000"]


def _shown_step(text: str) -> int:
    found = re.search(r"step (\d+)/100000", text)
    return int(found.group(1)) if found else -1


def _only_run(tmp_path: Path) -> Path:
    runs = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def _viewer_pids(pane_pid: int) -> list[int]:
    """Processes in the pane's session (the shell's children that a hang-up reaches), not detached ones."""
    try:
        sid = os.getsid(pane_pid)
        return [p.pid for p in psutil.Process(pane_pid).children(recursive=True) if os.getsid(p.pid) == sid]
    except (psutil.NoSuchProcess, ProcessLookupError):
        return []


def _stop_engine(run: Path) -> None:
    pid = (RunDir(run).read_status() or {}).get("pid")
    if pid and pid_alive(pid):
        psutil.Process(pid).terminate()
        wait_until(lambda: not pid_alive(pid), 30, "the engine to stop")


def test_hangup_detaches_attach_resumes_viewing_abort_is_clean(tmp_path: Path, tmux: Tmux) -> None:
    pane = tmux.start("train", paced(sensorlm(*TRAIN)))
    tmux.wait_for("train", lambda s: _shown_step(s) >= 20, 90, "the dashboard showing step 20")
    run = _only_run(tmp_path)
    try:
        engine_pid = RunDir(run).read_status()["pid"]
        viewers = _viewer_pids(pane)
        assert viewers and engine_pid not in viewers  # the engine runs in its own session: a hang-up misses it
        assert os.getsid(engine_pid) != os.getsid(pane)

        tmux.kill("train")  # a real hang-up: the pty closes under the viewer
        wait_until(lambda: not any(pid_alive(p) for p in viewers), 30, "the viewer to exit after SIGHUP")
        hung_up_at = status_step(run)
        wait_until(lambda: status_step(run) > hung_up_at + 20, 60, "training to go on after the hang-up")
        assert pid_alive(engine_pid)

        tmux.start("attach", sensorlm("attach"))  # no argument: the newest live run under ./runs
        text = tmux.wait_for("attach", lambda s: _shown_step(s) > hung_up_at + 20, 60, "attach showing the run")
        assert run.name in text.splitlines()[0]
        first = _shown_step(text)
        tmux.wait_for("attach", lambda s: _shown_step(s) > first, 30, "the attached viewer advancing")

        tmux.keys("attach", "a")
        tmux.wait_for("attach", lambda s: "graceful" in s, 20, "the abort modal")
        tmux.keys("attach", "g")
        text = tmux.wait_for("attach", lambda s: "EXIT=" in s, 60, "the viewer to exit after the abort")
        assert "EXIT=0" in text
        assert "aborted at step" in text  # the summary line, printed after the terminal was restored

        wait_until(lambda: not pid_alive(engine_pid), 30, "the engine to exit")
        status = RunDir(run).read_status()
        assert status["exit_code"] == 0 and status["state"] == "aborted"
        events = read_events(run)
        final = [e for e in events if e["type"] == "run_finished"][-1]
        last_ckpt = [e for e in events if e["type"] == "checkpoint"][-1]
        assert last_ckpt["step"] == final["steps"] == status["step"]
        assert (tmp_path / last_ckpt["path"]).is_file()
    finally:
        _stop_engine(run)


def test_in_process_hangup_checkpoints_and_stops(tmp_path: Path, tmux: Tmux) -> None:
    pane = tmux.start("train", paced(sensorlm(*TRAIN, "--in-process")))
    tmux.wait_for("train", lambda s: _shown_step(s) >= 20, 90, "the in-process dashboard showing step 20")
    run = _only_run(tmp_path)
    try:
        viewers = _viewer_pids(pane)
        tmux.kill("train")
        # The trainer lives in the viewer's process: the hang-up must checkpoint, then the process exits.
        wait_until(lambda: not any(pid_alive(p) for p in viewers), 60, "the in-process viewer to exit")
        status = RunDir(run).read_status()
        assert status["state"] == "aborted"
        events = read_events(run)
        final = [e for e in events if e["type"] == "run_finished"][-1]
        # The run's log says why it stopped: the hang-up, a checkpoint, in-process mode.
        assert final["reason"] == "terminal hung up (SIGHUP): checkpointed and stopped (in-process mode)"
        assert [e for e in events if e["type"] == "state"][-1]["reason"] == final["reason"]
        last_ckpt = [e for e in events if e["type"] == "checkpoint"][-1]
        assert last_ckpt["step"] == final["steps"] > 0
        assert (tmp_path / last_ckpt["path"]).is_file()  # a relative path is relative to the run's cwd
    finally:
        _stop_engine(run)
