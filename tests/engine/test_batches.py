"""The data path on torch.utils.data (engine.training.batches): the key sampler, and training through DataLoader workers
that is bit-identical to building inline, across a live batch-size change and a resume."""

from __future__ import annotations

import multiprocessing

import pytest
import torch

from engine.checkpoint import store
from engine.core import config as cfg
from engine.run.control.requests import Controls, set_value
from engine.run.sinks import EventBus, MemorySink
from engine.training.batches import KeySampler
from engine.training.loop import Trainer

torch.set_num_threads(1)


def test_the_sampler_hands_out_the_loops_keys_and_a_cut_voids_what_was_handed_out() -> None:
    generation = multiprocessing.get_context("spawn").Value("q", 0, lock=False)
    sampler = KeySampler(generation)
    sampler.cut([("a", 0), ("b", 1), ("c", 2)])
    tickets = iter(sampler)
    first = [next(tickets), next(tickets)]
    assert [key for _, key in first] == [("a", 0), ("b", 1)] and list(sampler.issued) == first
    sampler.cut([("x", 5), ("y", 6)])  # a batch-size change: the loop's keys from here on
    assert all(gen < generation.value for gen, _ in first), "tickets handed out before the cut are void"
    assert not sampler.issued
    assert [key for _, key in iter(sampler)] == [("x", 5), ("y", 6)]
    assert all(gen == generation.value for gen, _ in sampler.issued)


def _trainer(tmp_path, resume=None, **runtime) -> tuple[Trainer, MemorySink]:
    config = cfg.load(task="toy", overrides={"train": {"max_steps": 12, "batch_size": 8, "grad_accum": 2,
                                                       "log_every": 1},
                                             "evaluation": {"every": 0}, "runtime": runtime})
    sink = MemorySink()
    trainer = Trainer(config, EventBus([sink]), Controls(), checkpoint_dir=tmp_path, resume=resume)
    trainer.setup()
    return trainer, sink


def _train(trainer: Trainer, sink: MemorySink, until: int, change_at: int = 4) -> dict[int, float]:
    while trainer.step < until:
        if trainer.step == change_at:
            trainer.control.apply([set_value("batch_size", 5)])  # live: the sampler is re-cut (5 = 3 + 2)
        trainer.train_step()
        trainer.log_step()
    return {e.step: e.loss for e in sink.drain() if e.type == "step"}


@pytest.mark.slow
def test_dataloader_workers_train_bit_identically_through_a_batch_change_and_a_resume(tmp_path) -> None:
    workers, sink = _trainer(tmp_path / "w", data_workers=1)
    try:
        losses = _train(workers, sink, 8)
        workers.checkpoint()
        losses |= _train(workers, sink, 12)
        hits, misses = workers.prefetch.hits, workers.prefetch.misses
    finally:
        workers.prefetch.close()
    inline, sink = _trainer(tmp_path / "i", prefetch=False)
    reference = _train(inline, sink, 12)
    assert losses == reference and len(losses) == 12
    # 24 micro-batches: the first is built while the worker starts, the first after the change is built
    # inline (the sampler had handed out the old size's keys); the worker served the rest.
    assert misses <= 3 and hits == 24 - misses, (hits, misses)

    resumed, sink = _trainer(tmp_path / "w", resume=store.load_latest(tmp_path / "w"), data_workers=1)
    try:
        assert resumed.step == 8 and resumed.settings.batch_size == 5
        after = _train(resumed, sink, 12)
        assert resumed.prefetch.hits >= 6  # the resumed sampler was cut at the checkpoint's position
    finally:
        resumed.prefetch.close()
    assert after == {s: reference[s] for s in range(9, 13)}


#: Run in a fresh interpreter: the first spawn of a process starts multiprocessing's resource tracker, which is what
#: failed, and in the test process an earlier test has long started it.
_UNDER_TEXTUAL_STDIO = r"""
import os, sys
import torch
from engine.core import config as cfg
from engine.training.batches import WorkerBatches
from engine.core.registry import make_task


class Capture:  # what Textual puts in sys.stdout / sys.stderr while an app runs: fileno() is -1
    def write(self, text): return len(text)
    def flush(self): pass
    def fileno(self): return -1


config = cfg.load(task="toy", overrides={"train": {"batch_size": 4}})
task = make_task(config)
task.setup(None)
capture = Capture()
sys.stdout = sys.stderr = capture
keys = [((i, i + 1, i + 2, i + 3), i) for i in range(0, 40, 4)]
source = WorkerBatches(lambda key: task.make_batch(list(key[0]), key[1], train=True), 1,
                       (config.model_dump(mode="json"), task.state_dict()), wait=True)
try:
    source.ahead(lambda: keys)
except Exception as exc:  # sys.stderr is the capture: say it down the pipe
    os.write(int(sys.argv[1]), f"{type(exc).__name__}: {exc}".encode())
    raise
got = [source.take(key) for key in keys]
same = all(torch.equal(a[name], b[name]) for key, a in zip(keys, got)
           for b in [task.make_batch(list(key[0]), key[1], train=True)] for name in a)
restored = sys.stdout is capture and sys.stderr is capture
source.close()
os.write(int(sys.argv[1]),
         f"hits={source.hits} same={same} restored={restored} silent={source.dataset.silent}".encode())
"""


@pytest.mark.slow
def test_worker_processes_start_under_the_in_process_dashboards_stdio(tmp_path) -> None:
    """Textual's stdio objects have fileno() -1; spawning the first worker used to fail with "bad value(s) in
    fds_to_keep" (the resource tracker keeps sys.stderr's fd), so an in-process run had no worker processes."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    proc = subprocess.run([sys.executable, "-c", _UNDER_TEXTUAL_STDIO, str(write)], pass_fds=(write,),
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": os.getcwd()})
    os.close(write)
    with os.fdopen(read) as pipe:
        report = pipe.read()
    assert report == "hits=10 same=True restored=True silent=True", (report, proc.stderr[-2000:])
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.slow
def test_a_worker_dying_while_the_loader_closes_does_not_fail_the_run() -> None:
    """Seen in CI: at a graceful abort a worker's C++ runtime aborted on exit, torch's SIGCHLD handler raised
    "DataLoader worker (pid …) is killed by signal: Aborted" inside the shutdown's join, and the run ended failed."""
    import os
    import signal
    import time

    from engine.core.registry import make_task
    from engine.training.batches import WorkerBatches

    config = cfg.load(task="toy", overrides={"train": {"batch_size": 4}})
    task = make_task(config)
    task.setup(None)
    keys = [((i, i + 1, i + 2, i + 3), i) for i in range(0, 24, 4)]
    source = WorkerBatches(lambda key: task.make_batch(list(key[0]), key[1], train=True), 2,
                           (config.model_dump(mode="json"), task.state_dict()), wait=True)
    source.ahead(lambda: keys)
    for key in keys[:3]:
        source.take(key)
    assert source.hits == 3
    it = source._iter
    shutdown = it._shutdown_workers

    def abort_one_then_shut_down() -> None:  # a worker dies as the shutdown begins, its SIGCHLD lands meanwhile
        it._shutdown_workers = shutdown  # once: the iterator's __del__ calls it again
        victim = it._workers[0]
        os.kill(victim.pid, signal.SIGABRT)
        victim.join(5)
        time.sleep(0.2)  # part of the fault, not a wait: the window its SIGCHLD lands in, unseen from here
        shutdown()

    it._shutdown_workers = abort_one_then_shut_down
    source.close()  # raised RuntimeError("DataLoader worker (pid …) is killed by signal: Aborted.") before the fix
    assert source._iter is None and not any(w.is_alive() for w in it._workers)


_EXIT_WHILE_SENDING = """
import sys, torch, multiprocessing as mp
from engine.training.batches import finish_sends
if sys.argv[1] == "joined":  # the join is what is tested: its bound (FEEDER_JOIN_S) is not, so a loaded box's
    import atexit              # slow 200 MB copy cannot outlast it
    atexit.register(finish_sends, 60.0)
queue = mp.get_context("spawn").Queue()
queue.put(torch.zeros(50_000_000))  # the feeder moves 200 MB into shared memory, GIL released, as we exit
queue.cancel_join_thread()  # what DataLoader's worker loop does at shutdown
queue.close()
"""


@pytest.mark.slow
def test_a_worker_exiting_while_its_feeder_sends_a_batch_ends_cleanly() -> None:
    # A DataLoader worker's exit as a graceful abort makes it: its queue's feeder thread is still pickling a
    # batch. Unjoined, the interpreter's finalization ends that thread inside torch's C++ and the C++ runtime
    # aborts ("terminate called without an active exception", SIGABRT) — the line every graceful abort of a
    # run with workers left in engine.log.
    import subprocess
    import sys

    from tests.conftest import cli_env

    def run(mode: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", _EXIT_WHILE_SENDING, mode], capture_output=True, text=True,
                              timeout=120, env=cli_env())

    # The hazard is a race: under load the feeder sometimes finishes its copy before finalization reaches it
    # (1 run in 15 beside 3 CPU hogs), so it gets three tries to show itself; the joined run gets one.
    def crashed(result: subprocess.CompletedProcess) -> bool:
        return result.returncode != 0 and "terminate called" in result.stderr

    tries = [run("bare")]
    while not crashed(tries[-1]) and len(tries) < 3:
        tries.append(run("bare"))
    assert crashed(tries[-1]), ("the hazard reproduces without the join",
                                [(t.returncode, t.stderr[-300:]) for t in tries])
    joined = run("joined")
    assert joined.returncode == 0 and "terminate called" not in joined.stderr, joined.stderr[-2000:]


def _blocked(pid: int) -> set[int]:
    """The signals process ``pid`` blocks (its SigBlk mask)."""
    from pathlib import Path

    mask = int(Path(f"/proc/{pid}/status").read_text().split("SigBlk:")[1].split()[0], 16)
    return {n for n in range(1, 64) if mask >> (n - 1) & 1}


def test_ctrl_c_while_the_workers_start_checkpoints_and_stops_without_a_traceback(tmp_path) -> None:
    """Ctrl-C reaches the terminal's whole process group. Early in a run it found the data workers importing
    torch: each printed a KeyboardInterrupt traceback from multiprocessing/spawn.py, and the trainer, its workers
    gone, failed the run (exit 1) instead of checkpointing it. The workers block the terminal's signals (the
    parent owns the stop): the run checkpoints, exits 130 and prints no traceback."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    from tests.conftest import ROOT, cli_env, read_events

    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "tui.cli", "train", "--headless", "--task", "toy", "--threads", "1",
                             "--max-steps", "100000", "--run-dir", str(run), "--set", "runtime.data_workers=2"],
                            cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)  # its own group: a terminal's
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("state running"):
                break
        deadline = time.monotonic() + 60
        while True:  # spawned by the first step, then importing torch for seconds: the moment a Ctrl-C found them
            workers = [p for p in psutil.Process(proc.pid).children() if "spawn_main" in " ".join(p.cmdline())]
            if len(workers) == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert len(workers) == 2, lines
        assert all({signal.SIGINT, signal.SIGHUP} <= _blocked(w.pid) for w in workers)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group, workers included
        rest = proc.communicate(timeout=120)[0]
    finally:  # an assert before the stop must not leave a 100,000-step run training
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    said = "".join(lines) + rest
    assert proc.returncode == 130, said[-3000:]
    assert "Traceback" not in said and "KeyboardInterrupt" not in said, said[-3000:]
    finished = [e for e in read_events(run) if e["type"] == "run_finished"][-1]
    saved = [e for e in read_events(run) if e["type"] == "checkpoint"][-1]
    assert finished["status"] == "aborted" and saved["step"] == finished["steps"]


_ABANDONED_HANDOFF = """
import os, socket, sys
from multiprocessing import resource_sharer
if sys.argv[1] == "quiet":
    from engine.training.batches import quiet_abandoned_handoffs
    quiet_abandoned_handoffs()
r, w = os.pipe()
left, kept = resource_sharer.DupFd(r), resource_sharer.DupFd(w)  # two storages this worker offers its trainer
sock = socket.socket(socket.AF_UNIX)
sock.connect(left._id[0])
sock.close()  # the trainer stopped in the middle of asking for the first
os.close(kept.detach())  # the second served: the sharer's one thread has dealt with the first
sys.excepthook(ValueError, ValueError("another error still shown"), None)
"""


def test_a_handoff_the_trainer_abandoned_prints_no_traceback_from_the_worker() -> None:
    # Five Ctrl-Cs 50 ms apart (tests/engine/reliability/test_signals_repeated.py) ended a run cleanly, then a
    # worker's resource-sharer thread printed "BrokenPipeError" with a traceback into the engine's stderr: the
    # trainer had stopped while asking for a batch's file descriptor. The same abandoned request, by hand.
    import subprocess
    import sys

    from tests.conftest import cli_env

    def run(mode: str) -> str:
        done = subprocess.run([sys.executable, "-c", _ABANDONED_HANDOFF, mode], capture_output=True, text=True,
                              timeout=120, env=cli_env())
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stderr

    gone = ("BrokenPipeError", "ConnectionResetError", "EOFError")  # which one: whether the close beat the accept
    bare = run("bare")
    assert "resource_sharer.py" in bare and any(e in bare for e in gone), bare  # what the worker printed
    quiet = run("quiet")
    assert "Traceback" not in quiet and not any(e in quiet for e in gone), quiet
    assert "ValueError: another error still shown" in quiet, quiet
