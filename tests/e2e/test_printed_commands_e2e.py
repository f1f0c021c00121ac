"""Every command the program prints runs as printed, pasted into a fresh shell in the user's directory.

A user trains on the dashboard in tmux and presses q. The detach line names an attach command and
``kill -INT PID``; each is pasted as printed into ``bash -c`` with a fresh environment (no activated venv:
PATH is the system's, as in a new SSH login) in the directory the user started from:

- the attach command opens the dashboard on the run in a second terminal (``--read-only`` added, so the test
  can leave without a question), and with stdin closed it says what to use instead, naming `runs`, which
  lists the run;
- ``kill -INT PID`` stops the real engine: a checkpoint, exit 130, and engine.log's last line is the resume
  command, which, pasted, resumes the run from that checkpoint.

The printed program is ``sensorlm-tui`` only when that name on PATH is this installation's
(engine.core.invocation); here it is the console script's path. PYTHONPATH stays the checkout's, so what runs
is the code under test rather than whichever tree the virtual environment was installed from.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from engine.run.rundir import RunDir
from tests.conftest import ROOT, read_events
from tests.e2e.tmux import Tmux, needs_tmux, paced, sensorlm

pytestmark = [needs_tmux, pytest.mark.e2e, pytest.mark.slow]

DETACHED = re.compile(r"Attach: (?P<attach>.+?) · stop: (?P<stop>kill -INT \d+) \(it checkpoints first\)")


def _fresh_env() -> dict:
    """A new login's environment: the system PATH (no venv), a UTF-8 locale; the checkout importable."""
    return {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8",
            "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "NO_COLOR": "1"}


def _paste(line: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=_fresh_env(), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def _last_step(run: Path) -> int:
    steps = [e["step"] for e in read_events(run) if e["type"] == "step"]
    return steps[-1] if steps else -1


def test_detach_attach_kill_and_resume_lines_run_as_printed(tmp_path: Path, tmux: Tmux) -> None:
    run = tmp_path / "runs" / "pasted"
    try:
        _detach_attach_kill_and_resume(run, tmp_path, tmux)
    finally:  # a detached engine outlives tmux: an assert failing before `kill -INT` must not leave it training
        _stop_engine(run)


def _stop_engine(run: Path) -> None:
    pid = (RunDir(run).read_status() or {}).get("pid") if run.is_dir() else None
    if pid and _alive(pid):
        os.killpg(os.getpgid(pid), signal.SIGKILL)


def _detach_attach_kill_and_resume(run: Path, tmp_path: Path, tmux: Tmux) -> None:
    tmux.start("train", paced(sensorlm("train", "--task", "toy", "--max-steps", "100000", "--threads", "1",
                                       "--run-dir", "runs/pasted", "--set", "checkpoint.every_steps=50")))
    tmux.wait_for("train", lambda s: "RUNNING" in s, 120, "the run training")
    _wait(lambda: _last_step(run) >= 60, 120, "a checkpoint's worth of steps")
    tmux.keys("train", "q")
    text = tmux.wait_for("train", lambda s: "EXIT=" in s, 60, "the detach line", joined=True)
    detached = DETACHED.search(text)
    assert detached and "EXIT=0" in text, text
    attach, stop = detached.group("attach"), detached.group("stop")

    tmux.start("viewer", ["bash", "-c", f"{attach} --read-only"])  # a second terminal, the line pasted
    tmux.wait_for("viewer", lambda s: "pasted" in s and "read-only" in s.lower(), 60, "the attached dashboard")
    tmux.keys("viewer", "q")
    tmux.wait_for("viewer", lambda s: "EXIT=0" in s, 30, "the viewer to leave")

    no_terminal = _paste(attach, tmp_path)  # stdin closed: one line naming what to use instead
    assert no_terminal.returncode == 2, no_terminal.stderr
    listing = re.search(r"`([^`]+)` lists runs", no_terminal.stderr)
    assert listing, no_terminal.stderr
    runs = _paste(listing.group(1), tmp_path)
    assert runs.returncode == 0 and runs.stdout.splitlines()[1].split()[:2] == ["pasted", "live"], runs.stdout

    pid = RunDir(run).read_status()["pid"]
    assert _paste(stop, tmp_path).returncode == 0
    _wait(lambda: (RunDir(run).read_status() or {}).get("exit_code") is not None, 60, "the engine to stop")
    assert RunDir(run).read_status()["exit_code"] == 130
    finished = [e for e in read_events(run) if e["type"] == "run_finished"][-1]
    saved = [e for e in read_events(run) if e["type"] == "checkpoint"][-1]
    assert saved["step"] == finished["steps"], "kill -INT checkpoints first"
    printed = (run / "engine.log").read_text().strip().splitlines()[-1]
    assert printed == f"done  resume with: {finished['resume_command']}", printed
    _wait(lambda: not _alive(pid), 30, "the engine process to exit")

    resumed = subprocess.Popen(["bash", "-c", f"exec {printed.split('resume with: ', 1)[1]}"], cwd=tmp_path,
                               env=_fresh_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               stdin=subprocess.DEVNULL)
    try:
        _wait(lambda: _last_step(run) > finished["steps"], 120, "the pasted resume training on")
        started = [e for e in read_events(run) if e["type"] == "run_started"][-1]
        assert started["start_step"] == finished["steps"] and started["resumed_from"]
        resumed.send_signal(signal.SIGINT)
        assert resumed.wait(60) == 130
    finally:
        if resumed.poll() is None:
            resumed.kill()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
