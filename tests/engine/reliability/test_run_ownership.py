"""One engine per run directory: a second launch is refused in one line naming the holder; nothing it would
have written changes. A fresh run never writes into a directory that holds checkpoints."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.run.rundir import RunDir, RunDirError
from engine.run.runlock import RunLock
from tests.conftest import cli_env
from tests.engine.reliability.harness import TOY, events_of


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_line_refusal(engine, expect: str) -> None:
    assert engine.wait(60) == 2, engine.stderr()
    lines = engine.stderr().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sensorlm-tui: error: ") and expect in lines[0], lines
    assert "Traceback" not in engine.stderr()


@pytest.mark.slow
def test_two_launches_a_moment_apart_one_trains_the_other_exits_2(tmp_path: Path) -> None:
    """Real `python -m engine` processes: each spends seconds importing torch and setting up, so both pass
    any check made before setup (the old events.jsonl guard did, and the loser rewrote config.toml)."""
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "engine", *TOY, "--max-steps", "30", "--eval-every", "0", "--run-dir", str(run)]
    spawn = dict(cwd=tmp_path, env=cli_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                 stderr=subprocess.PIPE, text=True)
    first = subprocess.Popen([*argv, "--lr", "0.002"], **spawn)
    time.sleep(0.2)  # the race under test: a second launch a moment after the first, not a wait
    second = subprocess.Popen([*argv, "--lr", "0.003"], **spawn)
    (_, err1), (_, err2) = first.communicate(timeout=180), second.communicate(timeout=180)
    assert {first.returncode, second.returncode} == {0, 2}, (first.returncode, err1, second.returncode, err2)
    lr, loser = ("0.002", err2) if first.returncode == 0 else ("0.003", err1)
    lines = loser.splitlines()
    assert len(lines) == 1 and "Traceback" not in loser, loser
    assert "in use by another engine (pid" in lines[0] or "already holds a run" in lines[0], lines[0]
    assert f"lr = {lr}" in (run / "config.toml").read_text(), "the refused engine rewrote config.toml"
    assert events_of(run, "run_finished")[-1]["status"] == "finished"
    assert len(events_of(run, "run_started")) == 1


def test_a_second_engine_is_refused_by_the_lock_before_writing_anything(engines, tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    held = RunLock.acquire(run)  # this test process owns the directory, as a live engine would
    try:
        engine = engines.spawn([*TOY, "--max-steps", "5", "--run-dir", str(run.root)], tmp_path / "io")
        _one_line_refusal(engine, f"in use by another engine (pid {os.getpid()} on host {socket.gethostname()})")
        assert sorted(p.name for p in run.root.iterdir()) == ["engine.lock"], "refused engine wrote files"
    finally:
        held.release()


def test_resume_while_another_engine_owns_the_run_is_refused_and_changes_nothing(engines, tmp_path: Path) -> None:
    run = tmp_path / "run"
    done = engines.spawn([*TOY, "--max-steps", "5", "--eval-every", "0", "--run-dir", str(run)], tmp_path / "a")
    assert done.wait(60) == 0, done.stderr()
    before = {p.name: _sha(p) for p in (run / "config.toml", run / "status.json", run / "events.jsonl")}
    held = RunLock.acquire(RunDir(run))
    try:
        engine = engines.spawn(["--resume", str(run), "--max-steps", "10"], tmp_path / "b")
        _one_line_refusal(engine, f"in use by another engine (pid {os.getpid()}")
    finally:
        held.release()
    assert {p.name: _sha(p) for p in (run / "config.toml", run / "status.json", run / "events.jsonl")} == before


def test_a_fresh_run_never_writes_into_a_directory_with_checkpoints(engines, tmp_path: Path) -> None:
    run = tmp_path / "run"
    done = engines.spawn([*TOY, "--max-steps", "5", "--eval-every", "0", "--run-dir", str(run)], tmp_path / "a")
    assert done.wait(60) == 0, done.stderr()
    (run / "events.jsonl").unlink()
    (run / "config.toml").unlink()
    kept = {p.name: _sha(p) for p in (run / "checkpoints").iterdir()}
    engine = engines.spawn([*TOY, "--max-steps", "5", "--run-dir", str(run)], tmp_path / "b")
    # no config.toml: --resume could not continue it, so the refusal does not advise it
    _one_line_refusal(engine, f"{run}: holds checkpoints, status.json")  # and what else the run left
    assert "which a fresh run would overwrite" in engine.stderr() and "--resume" not in engine.stderr()
    assert {p.name: _sha(p) for p in (run / "checkpoints").iterdir()} == kept
    assert not (run / "config.toml").exists()


def test_the_lock_excludes_a_second_holder_in_the_same_process_and_is_released(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    first = RunLock.acquire(run)
    try:
        RunLock.acquire(run)
        raise AssertionError("second lock granted")
    except RunDirError as exc:
        assert f"pid {os.getpid()}" in str(exc) and "\n" not in str(exc)
    first.release()
    RunLock.acquire(run).release()
