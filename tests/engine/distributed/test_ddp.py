"""DDP under torchrun on 2 CPU processes (gloo): same losses as one process, a dead rank named, resume.

Each torchrun job costs ~15-30 s on the shared 2-core box (two interpreters importing torch), so the
file holds three jobs: one equality run, one killed run and its resume.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, cli_env, output, read_events, run_cli

pytestmark = pytest.mark.slow

#: The toy task without dropout (its masks are per sample index and step, so both layouts read the same data).
TOY = ("--task", "toy", "--batch-size", "8", "--grad-accum", "2", "--set", "toy.dropout=0", "--eval-every", "3")


def _losses(run_dir: Path) -> dict[int, float]:
    """Step → loss, the last time each step was logged unskipped (a rollback redoes steps)."""
    return {e["step"]: e["loss"] for e in read_events(run_dir) if e.get("type") == "step" and not e["skipped"]}


def test_two_ranks_train_like_one_process_with_the_same_global_batch(tmp_path, monkeypatch):
    # A NaN at step 5 (patience 1) rolls every run back to its step-3 checkpoint at LR x0.5: under DDP rank 0
    # alone has the checkpoints, so the losses only keep matching if every rank loads the state it chose.
    monkeypatch.setenv("SENSORLM_TUI_FAULTS", "nan@5")
    common = (*TOY, "--set", "train.log_every=1", "--set", "schedule.kind='constant'",
              "--set", "policies.nan_patience=1")
    one = run_cli(*common, "--max-steps", "12", "--run-dir", str(tmp_path / "one"), module="engine")
    assert one.returncode == 0, one.stderr[-2000:]
    # The job compiles the DDP-wrapped model (aot_eager: dynamo's DDP graph split and AOTAutograd, without
    # inductor's codegen), so its losses also check compile under DDP against the eager process.
    two = run_cli(*common, "--max-steps", "6", "--run-dir", str(tmp_path / "two"), "--nproc-per-node", "2",
                  "--compile", "model", "--set", "runtime.compile_backend='aot_eager'", module="engine", timeout=180)
    assert two.returncode == 0, output(two)
    a, b = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert sorted(b) == list(range(1, 7))
    rolled = [e for e in read_events(tmp_path / "two") if e.get("type") == "setting" and e["name"] == "lr"]
    assert len(rolled) == 1 and "rolled back to step 3" in rolled[0]["reason"], rolled
    # Not bit-identical: DDP adds the two ranks' gradients, one process sums all 8 samples in one reduction
    # (float summation order); measured differences are ~1e-7 relative.
    for step in b:
        assert abs(a[step] - b[step]) <= 1e-5 * abs(a[step]), (step, a[step], b[step])
    # One console line per step for the job (rank 0's), not one per rank.
    assert sum(" step " in f" {line.split(':', 1)[-1]}"[:7] for line in two.stdout.splitlines()) <= 6
    # Rank 0 owns the run directory: one event log, its checkpoints; the other rank only has its log.
    events = read_events(tmp_path / "two")
    assert sum(e.get("type") == "run_started" for e in events) == 1
    names = sorted(p.name for p in (tmp_path / "two").iterdir())
    assert names == sorted([p.name for p in (tmp_path / "one").iterdir() if p.name != "engine.log"] + ["ranks"])
    assert any(p.name == "stdout.log" and p.parent.name == "1" for p in (tmp_path / "two" / "ranks").rglob("*"))
    compiled = [e for e in events if e.get("type") == "compile"]
    assert compiled and compiled[0]["step"] == 1 and compiled[0]["mode"] == "model"
    # The 2-rank checkpoint continues in one process on the very next samples (the position is per shard),
    # eager: a compiled job's checkpoint resumes without compile.
    more = run_cli("--resume", str(tmp_path / "two"), "--max-steps", "12", "--compile", "off", module="engine")
    assert more.returncode == 0, more.stderr[-2000:]
    b = _losses(tmp_path / "two")
    for step in range(7, 13):
        assert abs(a[step] - b[step]) <= 1e-5 * abs(a[step]), (step, a[step], b[step])


def _rank_pid(run_dir: Path, rank: int) -> int | None:
    """The pid of the worker running ``rank`` of the job on ``run_dir`` (from /proc)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"engine.app.rank_worker" in cmd and str(run_dir).encode() in cmd and f"RANK={rank}".encode() in env:
            return int(entry.name)
    return None


def _stepped(run: Path) -> bool:
    return (run / "events.jsonl").exists() and any(e.get("type") == "step" for e in read_events(run))


def start_two_ranks_until_a_step(run: Path, *flags: str) -> tuple[subprocess.Popen, int]:
    """A 2-rank toy job on ``run`` (long: it runs until stopped), waited on until its first step; returns the
    job and rank 1's pid. The job is killed if it never steps."""
    job = subprocess.Popen([sys.executable, "-m", "engine", *TOY, "--max-steps", "100000", "--run-dir", str(run),
                            *flags, "--nproc-per-node", "2"], cwd=ROOT, env=cli_env(), stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not _stepped(run):
            assert job.poll() is None and time.monotonic() < deadline, job.communicate()
            time.sleep(0.2)
        pid = _rank_pid(run, 1)
        assert pid is not None
    except BaseException:
        if job.poll() is None:
            job.kill()
        raise
    return job, pid


def test_killed_rank_stops_the_job_names_it_and_resume_continues(tmp_path):
    run = tmp_path / "run"
    job, pid = start_two_ranks_until_a_step(run)
    try:
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        out, err = job.communicate(timeout=60)
        assert time.monotonic() - killed < 30
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 1, err[-2000:]
    assert "rank 1 exited with code -9 (SIGKILL)" in err
    finished = [e for e in read_events(run) if e.get("type") == "run_finished"][-1]
    assert "rank 1" in finished["reason"] and finished["resume_command"].endswith(f"--resume {run} --nproc-per-node 2")
    status = json.loads((run / "status.json").read_text())
    assert (status["state"], status["failed_rank"], status["failed_exit_code"]) == ("failed", 1, -9)

    # The resumed job also autotunes its micro-batching at its start: every candidate must land on both ranks
    # at the same step (a window ends at a step count every rank knows, decided from rank 0's numbers), and the
    # job ends with both ranks on the chosen settings at one step.
    # 80 steps: three candidates of 8 timed steps each, plus the steps that do not count (an evaluation every 3
    # steps, a batch not ready under load); a run that ends first stops the search ("stopped").
    stopped_at = finished["steps"]
    more = run_cli("--resume", str(run), "--max-steps", str(stopped_at + 80), "--nproc-per-node", "2", "--autotune",
                   "--set", "autotune.settings=['grad_accum']", "--set", "autotune.warmup_steps=0",
                   "--set", "autotune.window_steps=8", module="engine", timeout=180)  # a halfway look too
    assert more.returncode == 0, output(more)
    events = read_events(run)
    last = [e for e in events if e.get("type") == "run_finished"][-1]
    assert (last["status"], last["steps"]) == ("finished", stopped_at + 80)
    chose = [e for e in events if e.get("type") == "autotune_chose"][-1]
    assert chose["status"] in ("chosen", "kept") and len(chose["table"]) >= 2
    assert [r["rank"] for r in chose["ranks"]] == [0, 1]
    assert {r["step"] for r in chose["ranks"]} == {chose["step"]}
    assert all(r["settings"] == chose["settings"] for r in chose["ranks"]), chose["ranks"]


def test_rank_telemetry_names_a_slowed_rank_and_a_pause_lands_on_every_rank_at_one_step(tmp_path):
    from engine.distributed.telemetry import EVERY_STEPS, SLOW_ENV
    from engine.run.control import requests as control
    from engine.run.control.client import RunClient

    run = tmp_path / "run"
    env = {**cli_env(), SLOW_ENV: "1:0.05"}  # rank 1 sleeps 50 ms inside each step's own work
    job = subprocess.Popen([sys.executable, "-m", "engine", *TOY, "--max-steps", "100000", "--run-dir", str(run),
                            "--nproc-per-node", "2"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (run / "events.jsonl").exists() or \
                sum(e.get("type") == "ranks" for e in read_events(run)) < 2:
            assert job.poll() is None and time.monotonic() < deadline, job.communicate()
            time.sleep(0.2)
        client = RunClient(run)
        ack = client.send(control.pause(), timeout=30)
        assert ack.type == "setting", ack
        client.send(control.abort(), timeout=30)
        job.communicate(timeout=60)
    finally:
        if job.poll() is None:
            job.kill()
    events = read_events(run)
    every = [e for e in events if e.get("type") == "ranks" and e["reason"] == "every"]
    assert every and all(len(e["ranks"]) == 2 and e["step"] % EVERY_STEPS == 0 for e in every)
    assert every[-1]["straggler"] == 1 and every[-1]["cost_s"] > 0.02
    assert {r["rank"] for r in every[-1]["ranks"]} == {0, 1}
    assert all(r["rss"] > 50 << 20 for r in every[-1]["ranks"])  # each rank's process holds torch
    paused = next(e for e in events if e.get("type") == "state" and e["state"] == "paused")
    landed = [e for e in events if e.get("type") == "ranks" and e["reason"] == "control"]
    assert any([r["step"] for r in e["ranks"]] == [paused["step"]] * 2 for e in landed), (paused, landed)


def test_max_restarts_resumes_from_the_last_checkpoint_after_a_rank_dies(tmp_path):
    run = tmp_path / "run"
    job = subprocess.Popen([sys.executable, "-m", "engine", *TOY, "--max-steps", "150", "--checkpoint-every", "10",
                            "--run-dir", str(run), "--nproc-per-node", "2", "--max-restarts", "1"], cwd=ROOT,
                           env=cli_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
    try:
        deadline = time.monotonic() + 120
        while not _stepped(run):
            assert job.poll() is None and time.monotonic() < deadline, job.communicate()
            time.sleep(0.2)
        os.kill(_rank_pid(run, 1), signal.SIGKILL)
        _, err = job.communicate(timeout=150)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, err[-3000:]
    events = read_events(run)
    started = [e for e in events if e.get("type") == "run_started"]
    assert len(started) == 2 and started[1]["resumed_from"] and started[1]["start_step"] > 0
    assert [(e["status"], e["steps"]) for e in events if e.get("type") == "run_finished"][-1] == ("finished", 150)


def test_two_nodes_on_one_machine_train_and_checkpoint(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = tmp_path / "run"
    nodes = [subprocess.Popen([sys.executable, "-m", "engine", *TOY, "--max-steps", "6", "--run-dir", str(run),
                               "--nproc-per-node", "1", "--nnodes", "2", "--node-rank", str(rank),
                               "--rdzv-endpoint", f"127.0.0.1:{port}"], cwd=ROOT, env=cli_env(),
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for rank in (0, 1)]
    try:
        errs = [node.communicate(timeout=150)[1] for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
    assert [node.returncode for node in nodes] == [0, 0], [e[-2000:] for e in errs]
    events = read_events(run)
    assert [(e["status"], e["steps"]) for e in events if e.get("type") == "run_finished"] == [("finished", 6)]
    assert (run / "checkpoints" / "last.safetensors").is_file()
