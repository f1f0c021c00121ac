"""Liveness from status.json and the process it names: stalled (there, silent) is not crashed (gone).

The engine itself is stopped and continued in tests/tui/attach/test_stalled.py; here a plain process stands in
for it, so each state the process can be in is cheap to make: asleep, stopped, a zombie, or a newer process
that reuses the pid of one long gone.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from engine.run.rundir import STALE_AFTER_S, RunDir, liveness, pid_alive, probe


def _status(run: RunDir, pid: int, heartbeat: float, **more) -> None:
    run.status.write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "heartbeat": heartbeat,
                                      "started": heartbeat - 1, "state": "running", **more}))


@pytest.fixture
def sleeper():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()


def test_a_process_there_with_a_stale_heartbeat_is_stalled_with_its_state(tmp_path: Path, sleeper) -> None:
    run = RunDir(tmp_path / "r").create()
    beat = time.time()
    _status(run, sleeper.pid, beat)
    assert probe(run).state == "live"
    late = beat + STALE_AFTER_S + 20
    alive = probe(run, now=late)
    assert (alive.state, alive.pid, alive.silent_s(late)) == ("stalled", sleeper.pid, pytest.approx(25.0, abs=0.1))
    os.kill(sleeper.pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 10
        while probe(run, now=late).process != "stopped":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert probe(run, now=late).describe(late) == (
            f"stalled: no heartbeat for 25 s; its process (pid {sleeper.pid}) is stopped (SIGSTOP or Ctrl-Z): "
            f"kill -CONT {sleeper.pid} resumes it")
    finally:
        os.kill(sleeper.pid, signal.SIGCONT)
    assert liveness(run, now=late) == "stalled"


def test_a_zombie_or_a_process_reusing_the_pid_is_crashed(tmp_path: Path, sleeper) -> None:
    run = RunDir(tmp_path / "r").create()
    # The pid's process started after the heartbeat its status records: another process under a reused pid.
    _status(run, sleeper.pid, time.time() - 3600)
    assert liveness(run) == "crashed"
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while psutil.Process(zombie.pid).status() != psutil.STATUS_ZOMBIE:  # exited, not reaped
        assert time.monotonic() < deadline
        time.sleep(0.02)
    _status(run, zombie.pid, time.time())
    assert liveness(run) == "crashed" and not pid_alive(zombie.pid) and pid_alive(sleeper.pid)
    zombie.wait()
    assert liveness(run) == "crashed" and not pid_alive(zombie.pid)
    assert not pid_alive(0) and not pid_alive(2**40)  # status.json is anyone's to edit
