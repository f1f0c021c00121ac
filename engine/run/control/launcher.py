"""Start an engine process detached from the terminal, and know within seconds whether it came up.

``launch`` runs ``python -m engine <argv> --run-dir <dir>`` in its own session
(a hang-up of the terminal or Ctrl-C in the dashboard does not reach it), with
stdin from /dev/null, stdout and stderr appended to the run's engine.log, and
no other inherited descriptors. It returns once the engine's status.json
(written by this very process: same pid) has left "starting", or its control
socket has appeared. If the process exits first, ``LaunchError`` carries the
engine's own one-line error (the last non-empty line it wrote to engine.log)
and its exit code — found by ``Popen.poll`` every ``POLL_S``, so a bad flag is
reported in the time the engine takes to reject it, not after ``timeout``.

The run directory and engine.log exist before the engine validates its
config (the log must have somewhere to go); a failed launch leaves only that
log, which holds the error. Torch-free.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from engine.run.control.client import RunClient
from engine.run.rundir import RunDir

#: How often launch() checks on the starting engine (s).
POLL_S = 0.02
#: States that mean the engine is past start-up.
_UP = ("running", "paused", "checkpointing", "aborting", "finished", "aborted", "failed")


class LaunchError(Exception):
    """The engine did not come up; ``str()`` is one line, ``exit_code`` the process's (None if still running)."""

    def __init__(self, message: str, exit_code: int | None = None, log: Path | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.log = log


class LaunchedEngine:
    """A detached engine process started by ``launch``."""

    def __init__(self, process: subprocess.Popen, run_dir: Path) -> None:
        self.process = process
        #: The engine's process id.
        self.pid = process.pid
        #: Its run directory.
        self.run_dir = run_dir

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the engine to exit and return its exit code (subprocess.TimeoutExpired after ``timeout``)."""
        return self.process.wait(timeout)

    def poll(self) -> int | None:
        """The exit code if the engine has exited, else None."""
        return self.process.poll()

    def client(self, read_only: bool = False) -> RunClient:
        """A viewer of this engine's run."""
        return RunClient(self.run_dir, read_only=read_only)


def engine_command(argv: list[str], run_dir: Path) -> list[str]:
    """The engine's command line: this interpreter, ``-m engine``, the flags, the run directory."""
    return [sys.executable, "-m", "engine", *argv, "--run-dir", str(run_dir)]


def _environment() -> dict:
    env = dict(os.environ)
    # The engine package next to this file, whatever the caller's working directory.
    here = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"  # engine.log up to date when someone reads it after a crash
    return env


def _last_line(log: Path, start: int) -> str:
    try:
        with open(log, "rb") as handle:
            handle.seek(start)
            text = handle.read()[-65536:].decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def launch(argv: list[str], run_dir: Path | str, timeout: float = 60.0) -> LaunchedEngine:
    """Start an engine on ``run_dir`` and return when it is up; LaunchError (one line) when it is not."""
    run_dir = Path(run_dir).absolute()
    rd = RunDir(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        log = open(rd.log, "ab")
    except OSError as exc:
        raise LaunchError(f"{run_dir}: cannot create run directory ({exc.strerror})") from None
    log_start = log.tell()
    started = time.time()
    try:
        process = subprocess.Popen(
            engine_command(argv, run_dir), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            close_fds=True, start_new_session=True, env=_environment())
    except OSError as exc:
        raise LaunchError(f"cannot start the engine ({exc.strerror})", log=rd.log) from None
    finally:
        log.close()  # the child has its own copy
    deadline = time.monotonic() + timeout
    while True:
        code = process.poll()
        status = rd.read_status() or {}
        ours = status.get("pid") == process.pid
        if ours and status.get("state") in _UP:
            return LaunchedEngine(process, run_dir)
        if ours and _fresh_socket(rd, started):
            return LaunchedEngine(process, run_dir)
        if code is not None:
            if code == 0:  # a run short enough to finish before we looked: it came up
                return LaunchedEngine(process, run_dir)
            line = _last_line(rd.log, log_start) or "no output"
            raise LaunchError(f"engine exited with code {code}: {line}", exit_code=code, log=rd.log)
        if time.monotonic() > deadline:
            process.terminate()
            raise LaunchError(f"engine did not come up within {timeout:g} s (stopped it); see {rd.log}",
                              log=rd.log)
        time.sleep(POLL_S)


def _fresh_socket(rd: RunDir, started: float) -> bool:
    try:
        return os.stat(rd.socket).st_mtime >= started - 1
    except OSError:
        return False
