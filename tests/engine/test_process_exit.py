"""A run's process ends as soon as its run does: no seconds of interpreter teardown after the last line.

Stopped at once from a dashboard (its second Ctrl-C), an engine stayed alive about 8 s after the dashboard had
exited: Python's finalization garbage-collected torch's, sympy's and the task's modules one pass after another
(seen with gdb: ``finalize_modules`` → ``gc_collect_main``). The engine and a headless `train` now end through
engine.app.main.exit_now once the run's files are closed. A ``sitecustomize`` in these processes holds an object
whose ``__del__`` writes a marker during module teardown: the marker stays unwritten, and the process exits
within a second and a half of its run_finished event.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.run.control import requests as control
from engine.run.control.launcher import launch
from tests.conftest import ROOT, cli_env, read_events

pytestmark = pytest.mark.slow

SITECUSTOMIZE = '''import os

if os.environ.get("TEARDOWN_MARKER"):
    class _Teardown:
        def __del__(self, _open=os.open, _write=os.write, _close=os.close, _path=os.environ["TEARDOWN_MARKER"],
                    _flags=os.O_WRONLY | os.O_CREAT | os.O_APPEND, _pid=os.getpid):
            fd = _open(_path, _flags, 0o600)  # builtins are gone by the time module globals are torn down
            _write(fd, b"%d\\n" % _pid())
            _close(fd)

    _watch = _Teardown()
'''


@pytest.fixture
def teardown_marker(tmp_path: Path, monkeypatch) -> Path:
    """Processes started from here write the returned file if they tear their modules down."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    marker = tmp_path / "torn-down"
    monkeypatch.setenv("PYTHONPATH", f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("TEARDOWN_MARKER", str(marker))
    return marker


def _finished_at(run: Path) -> float | None:
    found = [e for e in read_events(run) if e["type"] == "run_finished"]
    return found[-1]["t"] if found else None


def test_an_engine_stopped_at_once_exits_with_its_last_event(tmp_path: Path, teardown_marker: Path) -> None:
    run = tmp_path / "run"
    engine = launch(["--task", "toy", "--threads", "1", "--max-steps", "100000", "--set", "runtime.data_workers=1",
                     "--run-dir", str(run)], run, timeout=180)
    try:
        deadline = time.monotonic() + 120
        while not any(e["type"] == "step" for e in read_events(run)) and time.monotonic() < deadline:
            time.sleep(0.1)
        engine.client().send(control.abort("now"), timeout=30)
        while (finished := _finished_at(run)) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert finished is not None, (run / "engine.log").read_text()[-2000:]
        assert engine.wait(60) == 130
        gone = time.time()
    finally:
        if engine.poll() is None:
            engine.process.kill()
    assert gone - finished < 1.5, f"the engine lived {gone - finished:.1f} s past its run"
    assert engine.pid not in _torn_down(teardown_marker), "the engine tore its modules down after the run"
    log = (run / "engine.log").read_text()
    assert "leaked" not in log and "Traceback" not in log, log[-2000:]
    # Stopped at once, nothing was saved at the stop: the exit line gives the step its checkpoint holds.
    ended = [e for e in read_events(run) if e["type"] == "run_finished"][-1]
    assert ended["status"] == "interrupted" and ended["checkpoint_step"] == 0 < ended["steps"]
    done = next(line for line in log.splitlines() if line.startswith("done  interrupted"))
    assert (f"no checkpoint at step {ended['steps']}; a resume starts from step 0 "
            f"({run}/checkpoints/last.safetensors)") in done, done


def test_a_headless_run_returns_the_prompt_with_its_last_line(tmp_path: Path, teardown_marker: Path) -> None:
    env = {**cli_env(), "PYTHONPATH": os.environ["PYTHONPATH"] + os.pathsep + str(ROOT)}
    done = subprocess.Popen([sys.executable, "-m", "tui.cli", "train", "--headless", "--task", "toy", "--threads", "1",
                             "--max-steps", "5", "--run-dir", str(tmp_path / "run")], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    out, err = done.communicate(timeout=180)
    assert done.returncode == 0, err
    assert "done  finished at step 5" in out
    assert done.pid not in _torn_down(teardown_marker), "the headless run tore its modules down after its last line"


def _torn_down(marker: Path) -> set[int]:
    """The pids that tore their modules down (a data worker ends normally: only the run's process must not)."""
    return {int(line) for line in marker.read_text().split()} if marker.exists() else set()
