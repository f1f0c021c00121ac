"""An SSH drop in the first seconds of a headless run: a real ``python -m engine`` on a real pseudo-terminal.

Python leaves SIGHUP at its default, which ended the engine with 129 while it imported torch: no message, no
run directory, ``on_hangup = continue`` or not. The engine now catches it from its first instruction
(engine.app.signals.catch_hangup): its output goes nowhere until the run directory exists, then to engine.log,
and the run trains to its end. (Every signal during start-up, without a terminal: tests/hostile/cases.toml's
[startup_signals], run by test_hostile.py.)
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from tests.conftest import cli_env

pytestmark = pytest.mark.slow


def _controlling_terminal() -> None:
    """In the child, after setsid: make fd 0 (the pty's slave) its controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def test_an_ssh_drop_while_importing_torch_does_not_end_the_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    master, slave = pty.openpty()
    engine = subprocess.Popen([sys.executable, "-m", "engine", "--task", "toy", "--threads", "1", "--max-steps", "3",
                               "--run-dir", str(run)], cwd=tmp_path, env=cli_env(), stdin=slave, stdout=slave,
                              stderr=slave, start_new_session=True, preexec_fn=_controlling_terminal)
    os.close(slave)
    shown, deadline = b"", time.monotonic() + 120
    try:
        while b"phase importing torch" not in shown:
            assert time.monotonic() < deadline and engine.poll() is None, shown.decode(errors="replace")
            shown += os.read(master, 4096)
    finally:
        os.close(master)  # the hang-up: the kernel sends SIGHUP to the session's leader, the engine
    code = engine.wait(timeout=120)
    assert code == 0, f"exit {code}: {shown.decode(errors='replace')}"
    status = json.loads((run / "status.json").read_text())
    assert (status["state"], status["exit_code"]) == ("finished", 0)
    log = (run / "engine.log").read_text()
    assert "SIGHUP while starting: terminal gone; training goes on, output now in" in log, log
    assert "done  finished at step 3" in log and "Traceback" not in log, log
