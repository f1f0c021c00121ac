"""Helpers for the attach / runs tests: real toy engines in subprocesses, and polling with a deadline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from tests.conftest import PACED_STEPS, ROOT, cli_env, pacing, wait_until

#: The engine flags every test run uses: the tiny toy task on one thread, effectively endless.
TOY = ["--task", "toy", "--threads", "1"]


def start_engine(run_dir: Path, *flags: str, max_steps: int = 100_000) -> subprocess.Popen:
    """``python -m engine`` on the toy task, detached in its own session like the launcher does it; paced when
    endless (``max_steps`` past PACED_STEPS; test_runs_cmd runs three such at once) and the test set no faults
    of its own."""
    env = cli_env()
    name, spec = pacing()
    if max_steps > PACED_STEPS and name not in env:
        env[name] = spec
    log = open(Path(run_dir).parent / f"{Path(run_dir).name}.out", "wb")
    return subprocess.Popen([sys.executable, "-m", "engine", *TOY, "--max-steps", str(max_steps),
                             "--run-dir", str(run_dir), *flags],
                            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def status_step(run_dir: Path) -> int:
    """The step status.json reports (0 before the engine wrote one)."""
    from engine.run.rundir import RunDir

    return int((RunDir(Path(run_dir)).read_status() or {}).get("step") or 0)


def wait_for_step(run_dir: Path, step: int, timeout: float = 60.0) -> int:
    """Wait until the engine reports at least ``step``; returns the step seen."""
    return wait_until(lambda: status_step(run_dir) >= step and status_step(run_dir), timeout,
                      f"{run_dir} to reach step {step}")


def stop(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """Make sure a test's engine is gone (SIGTERM, then SIGKILL)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)


@pytest.fixture
def engines():
    """Start engines with ``engines(run_dir, *flags)``; every one is stopped at teardown."""
    started: list[subprocess.Popen] = []

    def start(run_dir: Path, *flags: str, max_steps: int = 100_000) -> subprocess.Popen:
        proc = start_engine(run_dir, *flags, max_steps=max_steps)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        stop(proc)


def screen_text(app) -> str:
    """What the app's terminal shows right now, as plain text (one line per row).

    Uses the compositor Textual's own screenshots use (``export_screenshot``),
    without the SVG: the rows of the top screen including any modal.
    """
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def until(pilot, condition: Callable[[], object], timeout: float = 30.0, what: str = "condition",
                interval: float = 0.1):
    """Let the app run until ``condition`` holds; fail the test with ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}; screen:\n{screen_text(pilot.app)}")
        await pilot.pause(interval)
