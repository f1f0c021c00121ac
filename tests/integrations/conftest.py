"""Helpers for the integration tests: the example scripts in subprocesses, controls through the run's socket."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from engine.run import events as ev
from engine.run.control.client import RunClient
from engine.run.control.requests import Request
from tests.conftest import ROOT, cli_env, holds_for, log_events, read_events, wait_until
from tests.tui.attach.conftest import status_step

EXAMPLES = ROOT / "examples" / "integrations"

__all__ = ["EXAMPLES", "read_events", "send", "status_step", "wait_until", "holds_for", "kinds", "log_steps",
           "started_scripts", "running"]


def send(run: Path, request: Request, timeout: float = 60.0) -> ev.Event:
    """A control through the run's control socket, as `attach` sends it; the ack."""
    return RunClient(run).send(request, timeout=timeout)


def kinds(run: Path, kind: str) -> list[dict]:
    """Every event of one type in the run's log ([] before the log exists)."""
    if not (Path(run) / "events.jsonl").exists():
        return []
    return [e for e in read_events(run) if e.get("type") == kind]


def log_steps(run: Path) -> list[int]:
    """The steps events.jsonl has a line for: a line a second, the first, the last and every skipped one (``kinds``
    gives every step, from the step record)."""
    return [e["step"] for e in log_events(run) if e.get("type") == "step"]


def start_script(script: str, *args: str, log: Path) -> subprocess.Popen:
    """An example script in its own session (as a user's job would run), its output in ``log``."""
    return subprocess.Popen([sys.executable, str(EXAMPLES / script), *args], cwd=ROOT, env=cli_env(),
                            stdin=subprocess.DEVNULL, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop_script(proc: subprocess.Popen) -> None:
    """Kill a script still running, with its session (Lightning's DDP children go with it)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


@contextmanager
def running(script: str, *args: str, log: Path) -> Iterator[subprocess.Popen]:
    """``start_script`` for a block; killed at its end if it still runs."""
    proc = start_script(script, *args, log=log)
    try:
        yield proc
    finally:
        stop_script(proc)


@pytest.fixture
def started_scripts():
    """``start(script, *args)`` runs an example script (``start_script``); every one still running is killed at
    teardown. Its output goes to ``log``."""
    started: list[subprocess.Popen] = []

    def start(script: str, *args: str, log: Path) -> subprocess.Popen:
        started.append(start_script(script, *args, log=log))
        return started[-1]

    yield start
    for proc in started:
        stop_script(proc)
