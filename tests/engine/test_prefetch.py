"""The batch prefetcher: guessed keys come from the thread, wrong guesses are built inline, runs stay identical;
DataLoader worker processes never outlive a killed trainer."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from engine.core import config as cfg
from engine.run.control.requests import Controls
from engine.run.sinks import EventBus, MemorySink
from engine.training.loop import Trainer
from engine.training.prefetch import Prefetcher

torch.set_num_threads(1)


def test_a_guessed_key_is_built_on_the_thread_and_a_wrong_one_inline() -> None:
    where: dict = {}

    def build(key):
        where[key] = threading.current_thread().name
        return ("batch", key)

    p = Prefetcher(build)
    p.ahead([1])
    assert p.take(1) == ("batch", 1) and where[1].startswith("prefetch")
    p.ahead([2])
    assert p.take(3) == ("batch", 3) and where[3] == threading.current_thread().name  # the guess missed
    assert (p.hits, p.misses) == (1, 1)
    p.close()


def test_an_error_while_prefetching_reaches_the_caller() -> None:
    def build(key):
        raise ValueError(f"bad sample {key}")

    p = Prefetcher(build)
    p.ahead([7])
    with pytest.raises(ValueError, match="bad sample 7"):
        p.take(7)
    p.close()


def test_a_stop_leaves_a_build_in_progress_without_waiting_and_the_exit_does_not_join_it() -> None:
    """A stop gives up a step whose batch the thread is building (engine.training.loop): the engine's exit joins
    every thread not a daemon, and an executor's thread held it for as long as the build took."""
    started, release = threading.Event(), threading.Event()

    def build(key):
        started.set()
        release.wait(30)
        return key

    p = Prefetcher(build)
    p.ahead([1, 2])
    assert started.wait(10)
    builder = next(t for t in threading.enumerate() if t.name == "prefetch")
    t0 = time.monotonic()
    p.close(wait=False)
    assert time.monotonic() - t0 < 0.5 and builder.daemon and builder.is_alive()
    release.set()
    builder.join(10)
    assert not builder.is_alive()


def test_disabled_builds_everything_inline() -> None:
    p = Prefetcher(lambda key: threading.current_thread().name, enabled=False)
    p.ahead([1])
    assert p.take(1) == threading.current_thread().name and (p.hits, p.misses) == (0, 1)


def _losses(prefetch: bool, data_workers: int = -1, **train) -> tuple[list[float], Trainer]:
    config = cfg.load(task="toy", overrides={"train": {"max_steps": 12, **train}, "evaluation": {"every": 0},
                                             "runtime": {"prefetch": prefetch, "data_workers": data_workers}})
    sink = MemorySink()
    trainer = Trainer(config, EventBus([sink]), Controls())
    trainer.run()
    return [e.loss for e in sink.drain() if e.type == "step"], trainer


@pytest.mark.parametrize("accum", [1, 3])
def test_training_with_prefetch_is_bit_identical_and_mostly_served_ahead(accum: int) -> None:
    on, trainer = _losses(True, batch_size=12, grad_accum=accum, data_workers=0)  # the builder thread, not planned
    off, _ = _losses(False, batch_size=12, grad_accum=accum)
    assert on == off and len(on) == 12
    # Every batch but the very first was guessed: 12 steps × accum micro-batches.
    assert trainer.prefetch.hits == 12 * accum - 1 and trainer.prefetch.misses == 1


@pytest.mark.slow
def test_a_worker_exits_when_its_trainer_is_killed() -> None:
    _assert_no_worker_outlives_its_killed_trainer(
        "p.take(((1, 2), 0))  # a worker's result: it is up", settle_s=20)


@pytest.mark.slow
def test_a_worker_still_starting_exits_when_its_trainer_is_killed() -> None:
    """The trainer dies while its worker is still spawning (importing torch): the worker must not take init
    (pid 1) for its trainer and watch it forever — the orphans the suite used to leave behind."""
    # The worker finishes importing torch, then sees that it has no trainer.
    _assert_no_worker_outlives_its_killed_trainer("time.sleep(0.3)  # the worker is still starting", settle_s=40)


def _assert_no_worker_outlives_its_killed_trainer(before_kill: str, settle_s: float) -> None:
    """Start a trainer-like process with one data worker, run ``before_kill``, SIGKILL-like exit (no close(),
    no atexit), then require every worker gone within ``settle_s``."""
    import json
    import os
    import subprocess
    import sys
    import time

    from tests.conftest import ROOT

    script = f"""
import json, os, time, psutil
from engine.core import config as cfg
from engine.training.batches import WorkerBatches
c = cfg.load(task="toy")
p = WorkerBatches(lambda key: key, 1, (c.model_dump(mode="json"), None), wait=True)
p.ahead(lambda: [((1, 2), 0)])
{before_kill}
print(json.dumps([child.pid for child in psutil.Process().children()]), flush=True)
os._exit(9)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180, cwd=ROOT)
    children = json.loads(out.stdout.strip().splitlines()[-1])
    assert children, out.stderr
    deadline = time.monotonic() + settle_s
    alive = children
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [pid for pid in children if _alive(pid)]
    for pid in alive:
        os.kill(pid, 9)
    assert not alive, f"orphaned worker processes {alive}"


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
