"""A full disk, a checkpoint directory that turns read-only mid-run, a run directory that cannot be written.

Saves that fail leave the previous checkpoint byte-for-byte intact and no
temp file behind, report CheckpointFailed, and training goes on; a save after
the disk is writable again succeeds. A run directory that cannot be created
is a one-line error with exit 2. The full disk is a real tmpfs of 3 MiB
and read-only is a real read-only bind mount as root (chmod would not stop
root; other users get chmod); where mounting is not allowed the tmpfs test skips and says why.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.engine.reliability.harness import TOY, events_of, verify_all


def _mount(*args: str) -> None:
    result = subprocess.run(["mount", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise OSError(result.stderr.strip() or f"mount {' '.join(args)} failed")


@contextmanager
def _mounted(target: Path, *args: str):
    """Mount something on ``target`` for the block (skips the test when mounting is not allowed here)."""
    try:
        _mount(*args, str(target))
    except (OSError, FileNotFoundError) as exc:
        pytest.skip(f"cannot mount here ({exc}); needs root with CAP_SYS_ADMIN")
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


@contextmanager
def _read_only_switch(target: Path):
    """Yields (set_read_only(bool), the OS error text to expect): a read-only bind mount as root (permission
    bits do not stop root), chmod for anyone else."""
    if os.geteuid() != 0:
        try:
            yield (lambda ro: target.chmod(0o555 if ro else 0o755)), "Permission denied"
        finally:
            target.chmod(0o755)
        return
    with _mounted(target, "--bind", str(target)):
        yield (lambda ro: _mount("-o", f"remount,{'ro' if ro else 'rw'},bind", str(target))), "Read-only file system"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_disk_full_keeps_the_previous_checkpoint_and_training_goes_on(engines, tmp_path: Path) -> None:
    from engine.checkpoint import store

    run = tmp_path / "run"
    checkpoints = run / "checkpoints"
    checkpoints.mkdir(parents=True)
    # 3 MiB holds last + last.prev (1.2 MiB each once Adam has state) and not a third copy being written.
    with _mounted(checkpoints, "-t", "tmpfs", "-o", "size=3m", "tmpfs"):
        engine = engines.spawn([*TOY, "--max-steps", "60", "--eval-every", "0", "--checkpoint-every", "10",
                                "--set", "checkpoint.save_best=false", "--run-dir", str(run)], tmp_path)
        code = engine.wait(120)
        saved = [e for e in events_of(run, "checkpoint") if e["kind"] in ("last", "final")]
        failed = events_of(run, "checkpoint_failed")
        finished = events_of(run, "run_finished")[-1]
        if failed and failed[-1]["step"] == 60:  # the final save failed too: not a clean exit
            assert code == 1 and "final checkpoint FAILED (" in finished["reason"], (code, finished)
            assert f"newest good checkpoint {checkpoints / 'last.safetensors'}" in finished["reason"]
        else:
            assert code == 0, engine.stderr()
        assert saved and failed, "the disk never filled up: the test proves nothing"
        assert all("No space left on device" in e["error"] for e in failed), failed
        assert any(e["step"] > failed[0]["step"] for e in events_of(run, "step"))  # trained on after the failure
        assert events_of(run, "run_finished")[-1]["steps"] == 60
        assert set(verify_all(checkpoints).values()) == {"ok"}
        assert not list(checkpoints.glob(".*.tmp-*")), "a failed save must remove its partial temp file"
        newest = store.load_latest(checkpoints)
        assert newest.meta["step"] == saved[-1]["step"] < failed[-1]["step"]
        assert any(line.startswith(f"ckpt! step {failed[0]['step']} save failed, previous checkpoint kept")
                   for line in engine.lines())


def test_read_only_checkpoints_mid_run_then_writable_again(engines, tmp_path: Path) -> None:
    from engine.checkpoint import store

    run = tmp_path / "run"
    checkpoints = run / "checkpoints"
    checkpoints.mkdir(parents=True)
    with _read_only_switch(checkpoints) as (set_read_only, os_error):
        engine = engines.spawn([*TOY, "--max-steps", "100000", "--eval-every", "0", "--checkpoint-every", "5",
                                "--set", "checkpoint.save_best=false", "--run-dir", str(run)], tmp_path)
        engine.wait_for(r"^ckpt  step 5 last")
        set_read_only(True)
        at = len(engine.lines())
        first_failure = int(engine.wait_for(r"^ckpt! step (\d+) save failed", after=at).group(1))
        good = store.load_latest(checkpoints)
        digest, good_step = _sha(good.path), good.meta["step"]
        assert good_step < first_failure
        engine.wait_for(rf"^ckpt! step {first_failure + 5} save failed")  # still training, still failing
        assert _sha(good.path) == digest and store.load_latest(checkpoints).meta["step"] == good_step
        set_read_only(False)
        recovered = int(engine.wait_for(r"^ckpt  step (\d+) last", after=at).group(1))
        assert recovered > first_failure + 5
        engine.signal(signal.SIGTERM)
        assert engine.wait(60) == 130
        failed = events_of(run, "checkpoint_failed")
        assert failed and all(os_error in e["error"] for e in failed), failed
        assert set(verify_all(checkpoints).values()) == {"ok"}
        assert store.load_latest(checkpoints).meta["step"] >= recovered
        assert not list(checkpoints.glob(".*.tmp-*"))


def test_unwritable_run_directory_is_a_one_line_error(engines, tmp_path: Path) -> None:
    parent = tmp_path / "ro"
    parent.mkdir()
    with _read_only_switch(parent) as (set_read_only, os_error):
        set_read_only(True)
        engine = engines.spawn([*TOY, "--max-steps", "5", "--run-dir", str(parent / "run")], tmp_path)
        assert engine.wait(60) == 2
        why = "cannot create run directory (Read-only file system)" if os_error.startswith("Read-only") \
            else "run directory is not writable"
        assert engine.stderr().strip().splitlines() == [f"sensorlm-tui: error: {parent / 'run'}: {why}"]
        # stdout holds at most the headless engine's start-up progress (engine.app.startup: `phase …` lines)
        assert [line for line in engine.lines() if not line.startswith("phase ")] == []
        assert list(parent.iterdir()) == []


def test_run_directory_under_proc_is_a_one_line_error(engines, tmp_path: Path) -> None:
    """Needs no mount: /proc is a system directory, refused before anything is tried there."""
    target = f"/proc/sensorlm-tui-test-{os.getpid()}/run"
    engine = engines.spawn([*TOY, "--max-steps", "5", "--run-dir", target], tmp_path)
    assert engine.wait(60) == 2
    lines = engine.stderr().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"sensorlm-tui: error: --run-dir {target}: a system directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["err-0.txt", "out-0.txt"]  # nothing else written


def _fill(directory: Path) -> Path:
    """Write a file until the file system is full; returns it (deleting it gives the space back)."""
    filler = directory / "filler"
    chunk = b"\0" * (64 << 10)
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(chunk)
        except OSError:
            pass
    for small in (4096, 512, 1):  # the last partial blocks too: events.jsonl must not find a byte free
        try:
            with open(filler, "ab", buffering=0) as handle:
                while True:
                    handle.write(b"\0" * small)
        except OSError:
            pass
    return filler


@pytest.mark.slow
def test_full_disk_under_the_whole_run_directory_loses_no_event(engines, tmp_path: Path) -> None:
    """The whole run directory on a 16 MiB tmpfs, filled mid-run: the event log keeps its lines in memory,
    says so in a Warning, and writes every one once space returns (before, it detached for good)."""
    run = tmp_path / "run"
    run.mkdir()
    # mode 0700: a tmpfs root is 1777 by default, which a run directory may not be (engine.run.trust)
    with _mounted(run, "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs"):
        engine = engines.spawn([*TOY, "--max-steps", "1000000", "--eval-every", "0", "--checkpoint-every", "0",
                                "--run-dir", str(run)], tmp_path)
        engine.wait_for(r"^step\s+20/")
        filler = _fill(run)
        at = len(engine.lines())
        engine.wait_for(r"^warn .*events\.jsonl: cannot write events \(No space left on device\)", after=at)
        full_at = engine.last_step()
        engine.wait_for(rf"^step\s+{full_at + 50}/")  # trains on with the disk full
        filler.unlink()
        engine.wait_for(r"^warn .*events\.jsonl: writable again after 'No space left on device'; \d+ events "
                        r"written late", after=at)
        engine.signal(signal.SIGTERM)
        assert engine.wait(60) == 130, engine.stderr()
        steps = [e["step"] for e in events_of(run, "step")]
        assert steps == list(range(1, len(steps) + 1)), "a step event is missing or out of order"
        assert steps[-1] > full_at + 50
        finished = events_of(run, "run_finished")
        assert finished and finished[-1]["steps"] == steps[-1]
        warnings = [e["text"] for e in events_of(run, "warning")]
        assert any("cannot write events (No space left on device)" in t for t in warnings)
        assert any("writable again" in t for t in warnings)


def test_event_backlog_is_bounded_and_never_drops_what_viewers_must_see(tmp_path: Path) -> None:
    from engine.run import events as ev
    from engine.run.sinks import JsonlSink

    target = tmp_path / "fs"
    target.mkdir()
    with _mounted(target, "-t", "tmpfs", "-o", "size=1m", "tmpfs"):
        told: list[str] = []
        sink = JsonlSink(target / "events.jsonl", max_backlog=20_000, retry_interval=0.0, warn=told.append,
                         step_every_s=0)  # every step's line (a run without a record): what outgrows the bound
        filler = _fill(target)
        for step in range(1, 2001):
            sink(ev.StepLogged(step=step, loss=1.0))
        sink(ev.RunFinished(status="finished", steps=2000))
        assert len(told) == 1 and "No space left on device" in told[0]
        assert sink.backlog < 20_000 + 1000, "the backlog outgrew its bound"
        filler.unlink()
        sink.flush()
        sink.close()
        assert "writable again" in told[-1] and "step events over the 19.5 KiB backlog were dropped" in told[-1], told
        lines = [json.loads(line) for line in (target / "events.jsonl").read_text().splitlines()]
        steps = [e["step"] for e in lines if e["type"] == "step"]
        assert steps == sorted(steps) and steps[0] == 1 and len(steps) < 2000
        assert lines[-1]["type"] == "run_finished", "run_finished is kept past the bound"
