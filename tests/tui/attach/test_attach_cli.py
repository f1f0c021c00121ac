"""`sensorlm-tui attach [RUN]`: which run it picks, and one-line exit-2 errors that list what exists."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest

from tests.conftest import program, run_cli
from tui.model.run_index import RunLookupError, resolve


def _fake_run(root: Path, name: str, state: str, started: float, alive: bool = True) -> Path:
    """A run directory whose status.json says ``state``; ``alive`` points its pid at this test process."""
    run = root / name
    run.mkdir(parents=True)
    (run / "events.jsonl").write_text('{"type":"schema","t":0,"version":1,"writer":"sensorlm-tui"}\n')
    pid = os.getpid() if alive else 2 ** 22 + 12345  # above pid_max's default: no such process
    (run / "status.json").write_text(json.dumps({
        "pid": pid, "host": socket.gethostname(), "started": started, "heartbeat": time.time(), "state": state,
        "step": 1, "total_steps": 10}))
    return run


def test_no_argument_picks_the_newest_live_run(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _fake_run(runs, "old-live", "running", started=100.0)
    newest = _fake_run(runs, "new-live", "paused", started=200.0)
    _fake_run(runs, "newer-finished", "finished", started=300.0)
    _fake_run(runs, "newest-crashed", "running", started=400.0, alive=False)
    assert resolve(None, runs) == newest
    assert resolve("old-live", runs) == runs / "old-live"  # a bare name resolves under runs/
    assert resolve(str(runs / "newer-finished"), runs) == runs / "newer-finished"  # a path is used as is


def test_no_live_run_lists_what_exists(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _fake_run(runs, "done", "finished", started=1.0)
    _fake_run(runs, "dead", "running", started=2.0, alive=False)
    with pytest.raises(RunLookupError) as err:
        resolve(None, runs)
    assert str(err.value) == (f"attach: no live run under {runs}/ (runs there: dead (crashed), done (finished)); "
                              f"give one by name to view it")


def test_cli_errors_are_one_line_exit_2(tmp_path: Path) -> None:
    nothing = run_cli("attach", cwd=tmp_path)
    assert nothing.returncode == 2
    assert nothing.stderr.splitlines() == [
        "sensorlm-tui: error: attach: no run given and no runs/ directory here; "
        f"give a run directory, e.g. `{program(tmp_path)} attach runs/<name>`"]

    _fake_run(tmp_path / "runs", "done", "finished", started=1.0)
    missing = run_cli("attach", "nosuch", cwd=tmp_path)
    assert missing.returncode == 2
    assert missing.stderr.splitlines() == [
        "sensorlm-tui: error: attach nosuch: no such run (runs under runs/: done (finished))"]

    (tmp_path / "plain").mkdir()
    not_run = run_cli("attach", str(tmp_path / "plain"), cwd=tmp_path)
    assert not_run.returncode == 2 and "not a run directory" in not_run.stderr
    assert len(not_run.stderr.splitlines()) == 1

    # A real run but no terminal (stdin is closed here): refused instead of a busy-spinning app.
    no_tty = run_cli("attach", "done", cwd=tmp_path)
    assert no_tty.returncode == 2
    assert no_tty.stderr.splitlines() == [
        "sensorlm-tui: error: attach done: needs a terminal (stdin and stdout are not a TTY); "
        f"`{program(tmp_path)} runs {tmp_path / 'runs'}` lists runs, {tmp_path / 'runs' / 'done' / 'events.jsonl'} "
        "has every event"]
    assert "Traceback" not in no_tty.stderr


def test_compare_of_no_such_run_or_of_itself_is_one_line_exit_2(tmp_path: Path) -> None:
    _fake_run(tmp_path / "runs", "done", "finished", started=1.0)
    missing = run_cli("attach", "done", "--compare", "nosuch", cwd=tmp_path)
    assert missing.returncode == 2
    assert missing.stderr.splitlines() == [
        "sensorlm-tui: error: --compare: attach nosuch: no such run (runs under runs/: done (finished))"]
    itself = run_cli("attach", "done", "--compare", "done", cwd=tmp_path)
    assert itself.returncode == 2 and len(itself.stderr.splitlines()) == 1
    assert "--compare done: that is the run being attached" in itself.stderr
