"""Autotune's state through a crash, an abort and a kill right after its result: never a setting no one chose.

A toy run starts at its slowest micro-batching (16 micro-batches of one sample: any other candidate beats it, each
micro-batch sleeping ``MICRO_BATCH_S`` as well, so no load on the box can make a candidate look slower: a loaded
run once kept the start) and searches grad_accum in windows of 40 steps, so a kill or a stop lands inside a
candidate's window. Before:

- kill -9 during a search, then ``--resume``: the run went on with the candidate being measured, and (a search a
  viewer started) never searched again;
- a graceful abort during a search left the candidate in the final checkpoint, config.toml the settings before;
- a search's result, killed before the next periodic checkpoint, was lost on resume.
"""

from __future__ import annotations

import signal
import time
import tomllib
from pathlib import Path

import pytest

from engine.checkpoint import store
from engine.run.control.client import RunClient
from engine.run.control.requests import autotune
from tests.conftest import pacing
from tests.engine.reliability.harness import TOY, events_of

START = 16  # grad_accum before the search: batch 16 in micro-batches of one
FLAGS = [*TOY, "--batch-size", "16", "--grad-accum", str(START), "--eval-every", "0", "--max-steps", "100000",
         "--set", "autotune.settings=['grad_accum']", "--set", "autotune.warmup_steps=1",
         "--set", "autotune.window_steps=40", "--set", "runtime.prefetch=false"]  # no worker processes to wait for


#: The sleep each micro-batch takes (engine.training.faults' ``slow``): 32 ms a step at the start, 2 ms at one.
MICRO_BATCH_S = 0.002


@pytest.fixture
def spawn(engines):
    """engines.spawn, each engine it started killed at the end if an assert left it training (100,000 steps)."""
    started = []

    def start(argv: list[str], workdir: Path):
        started.append(engines.spawn(argv, workdir, faults=pacing(MICRO_BATCH_S)[1]))
        return started[-1]

    try:
        yield start
    finally:
        for engine in started:
            if engine.code is None and engines.wait(engine.pid, 0) is None:
                engine.signal(signal.SIGKILL)
                engine.wait(30)


def _wait(run: Path, found, what: str, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while True:
        value = found() if (run / "events.jsonl").exists() else None
        if value:
            return value
        assert time.monotonic() < deadline, f"no {what} in {run}/events.jsonl"
        time.sleep(0.05)


def _candidate_checkpointed(run: Path):
    """The first checkpoint taken while a candidate other than the start was in force (its step), or None."""
    moved = [e["step"] for e in events_of(run, "setting") if e["name"] == "grad_accum"
             and e["reason"].startswith("autotune: candidate") and e["new"] != START]
    saved = [e["step"] for e in events_of(run, "checkpoint") if moved and e["step"] > moved[0]]
    return saved[0] if saved else None


def test_a_kill_during_a_search_resumes_with_the_settings_before_it_and_searches_again(spawn, tmp_path) -> None:
    run = tmp_path / "run"
    first = spawn([*FLAGS, "--set", "autotune.on_start=true", "--checkpoint-every", "5",
                           "--run-dir", str(run)], tmp_path / "first")
    _wait(run, lambda: _candidate_checkpointed(run), "checkpoint with a candidate in force")
    first.signal(signal.SIGKILL)
    first.wait(30)
    assert not events_of(run, "autotune_chose"), "killed during the search"
    meta = store.load_latest(run / "checkpoints").meta
    assert meta["grad_accum"] == meta["config"]["train"]["grad_accum"] == START and "since" in meta["autotune"]
    again = spawn(["--resume", str(run), "--set", "autotune.on_start=false"], tmp_path / "again")
    resumed = _wait(run, lambda: len(events_of(run, "run_started")) == 2 and events_of(run, "run_started")[-1],
                    "resumed run")
    assert resumed["config"]["train"]["grad_accum"] == START
    restarted = _wait(run, lambda: events_of(run, "autotune_started")[1:], "search after the resume")[0]
    assert restarted["start"] == {"grad_accum": START}
    assert restarted["reason"].startswith(f"resumed from a checkpoint taken during the search begun at step "
                                          f"{meta['autotune']['since']}")
    again.signal(signal.SIGTERM)
    assert again.wait(60) == 130


def test_a_graceful_abort_during_a_search_restores_the_settings_before_it(spawn, tmp_path) -> None:
    run = tmp_path / "run"
    engine = spawn([*FLAGS, "--set", "autotune.on_start=true", "--checkpoint-every", "5",
                            "--run-dir", str(run)], tmp_path)
    _wait(run, lambda: _candidate_checkpointed(run), "checkpoint with a candidate in force")
    engine.signal(signal.SIGTERM)
    assert engine.wait(60) == 130, engine.stderr()
    final = events_of(run, "checkpoint")[-1]
    assert final["kind"] == "final"
    meta = store.load_latest(run / "checkpoints").meta
    assert (meta["step"], meta["grad_accum"], meta["config"]["train"]["grad_accum"]) == (final["step"], START, START)
    assert "autotune" not in meta
    assert tomllib.loads((run / "config.toml").read_text())["train"]["grad_accum"] == START
    restored = [e for e in events_of(run, "setting") if e["name"] == "grad_accum"][-1]
    assert restored["new"] == START and "settings before it restored" in restored["reason"]
    chose = events_of(run, "autotune_chose")[-1]
    assert chose["status"] == "stopped" and chose["settings"] == {"grad_accum": START}


def test_a_searchs_result_is_recorded_before_it_is_reported(spawn, tmp_path) -> None:
    """A search a viewer started, its result reported, the engine killed at once: the resume keeps the result."""
    run = tmp_path / "run"
    first = spawn([*FLAGS, "--checkpoint-every", "100000", "--run-dir", str(run)], tmp_path / "first")
    first.wait_for(r"^step\s+3/")
    assert RunClient(run).send(autotune(), timeout=30).type == "autotune_started"
    chose = _wait(run, lambda: events_of(run, "autotune_chose"), "the search's result", timeout=300)[0]
    first.signal(signal.SIGKILL)
    first.wait(30)
    chosen = chose["settings"]["grad_accum"]
    assert chose["status"] == "chosen" and chosen != START, chose
    assert tomllib.loads((run / "config.toml").read_text())["train"]["grad_accum"] == chosen
    again = spawn(["--resume", str(run), "--max-steps", str(chose["step"] + 3)], tmp_path / "again")
    assert again.wait(120) == 0, again.stderr()
    resumed = events_of(run, "run_started")[-1]
    assert resumed["start_step"] == chose["step"] and resumed["config"]["train"]["grad_accum"] == chosen
    assert len(events_of(run, "autotune_started")) == 1, "no search again"
