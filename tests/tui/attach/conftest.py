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

from tests.conftest import ROOT, cli_env, wait_until

#: The engine flags every test run uses: the tiny toy task on one thread, effectively endless.
TOY = ["--task", "toy", "--threads", "1"]


#: An endless engine's first PACED_STEPS steps each sleep PACE_S (engine.training.faults' ``slow``): a live run to
#: watch at ~150 steps/s, not a core taken from the rest of the suite for the whole test (a toy engine at full
#: speed uses one; test_runs_cmd runs three at once on the 2-core box).
PACE_S = 0.005
PACED_STEPS = 20_000


def start_engine(run_dir: Path, *flags: str, max_steps: int = 100_000) -> subprocess.Popen:
    """``python -m engine`` on the toy task, detached in its own session like the launcher does it; paced when
    endless (``max_steps`` past PACED_STEPS) and the test set no faults of its own."""
    from engine.training.faults import ENV

    env = cli_env()
    if max_steps > PACED_STEPS and ENV not in env:
        env[ENV] = f"slow@1-{PACED_STEPS}={PACE_S}"
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
