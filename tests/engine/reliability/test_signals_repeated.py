"""Signals sent again and again: the engine exits with the code its status.json records, and says nothing else.

Five SIGINTs 50 ms apart printed "Exception ignored in atexit callback … raise KeyboardInterrupt" and "11 leaked
semaphore objects" (the third to fifth landed in the exit's own work); TERM and INT alternating ended one run
with 143 while its status.json said 130, another with "interrupted before training began". The engine runs
through engine/__main__.py (``entry="module"``), so its exit is a real one: ``exit_now``, atexit handlers and all.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.engine.reliability.harness import TOY, events_of

pytestmark = pytest.mark.slow

LONG = [*TOY, "--max-steps", "100000", "--eval-every", "0", "--checkpoint-every", "1000"]
NOISE = ("Traceback", "Exception ignored", "leaked semaphore", "KeyboardInterrupt", "before training began")


@pytest.mark.parametrize("burst", [["SIGINT"], ["SIGTERM", "SIGINT"]], ids=["sigints", "term_and_int_alternating"])
def test_repeated_signals_exit_with_the_code_status_records_and_no_traceback(engines, tmp_path: Path,
                                                                              burst: list[str]) -> None:
    """Signals 50 ms apart from step 5 until the engine is gone (a user holding Ctrl-C): whichever part of the
    ending each lands in, the exit is the status's and stderr stays empty."""
    run = tmp_path / "run"
    engine = engines.spawn([*LONG, "--set", "runtime.data_workers=1", "--run-dir", str(run)], tmp_path,
                           entry="module")
    try:
        engine.wait_for(r"^step\s+5/", timeout=120)
        sent, deadline = 0, time.monotonic() + 30
        while _alive(engine):
            assert time.monotonic() < deadline, "still running 30 s into the signals"
            engine.signal(getattr(signal, burst[sent % len(burst)]))
            sent += 1
            time.sleep(0.05)
    finally:  # an assert before the exit must not leave a 100,000-step run training
        if _alive(engine):
            engine.signal(signal.SIGKILL)
            engine.wait(30)
    assert sent >= 2
    code = engine.wait(60)
    status = json.loads((run / "status.json").read_text())
    finished = events_of(run, "run_finished")
    assert code == status["exit_code"] == 130, (code, status)
    assert len(finished) == 1 and finished[0]["exit_code"] == 130, finished  # one ending (which one: the timing's)
    stderr = engine.stderr()
    assert not any(word in stderr for word in NOISE), stderr[-3000:]
    # The resource tracker (a process of its own, writing to the same stderr) reports leaks as it notices its
    # client gone, then exits: stderr is whole once no process has it open.
    wait_until(lambda: not _writers(engine.err), 30, "every process writing the engine's stderr to exit")
    assert not any(word in engine.stderr() for word in NOISE), engine.stderr()[-3000:]


def _writers(path: Path) -> list[int]:
    """Pids of the processes that have ``path`` open."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        try:
            if any(f.path == str(path) for f in proc.open_files()):
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def _alive(engine) -> bool:
    """True while the engine process has not exited (its exit code is kept for ``wait``)."""
    if engine.code is None:
        engine.code = engine.server.wait(engine.pid, 0)
    return engine.code is None
