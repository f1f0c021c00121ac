"""Shared test helpers: run the real CLI / engine in a subprocess, read a run's events, wait on a condition.

A test never waits with a fixed sleep: too short under load (a flaky failure), too long on a quiet box (time
wasted on every run). It waits for what it needs with ``wait_until``; a test whose point is that something does
*not* happen for a while (a paused run takes no step) checks that all through the window with ``holds_for``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[1]


def cli_env() -> dict:
    """Environment for subprocesses: the repo importable, no colour, one torch thread."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["NO_COLOR"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


#: An endless engine a test only watches paces its first PACED_STEPS steps, each sleeping PACE_S (engine.training.
#: faults' ``slow``, per micro-batch): a live run at ~150 toy steps/s instead of one that takes a whole core from
#: the rest of the suite for as long as the test looks at it (two workers share two cores).
PACE_S = 0.005
PACED_STEPS = 20_000


def pacing(seconds: float = PACE_S) -> tuple[str, str]:
    """(environment variable, value) that paces an engine's first PACED_STEPS steps: ``seconds`` a micro-batch."""
    from engine.training.faults import ENV

    return ENV, f"slow@1-{PACED_STEPS}={seconds}"


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 120,
            module: str = "tui.cli") -> subprocess.CompletedProcess:
    """Run `python -m <module> args…` and capture its output (stdin closed, so never a dashboard)."""
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd or ROOT, env=cli_env(),
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="session")
def forks():
    """One preloaded fork server per test worker (tests/engine/reliability/forkserver.py), started on first use:
    ``run_forked`` and the fault-injection tests start their engines from it, each a real process forked after
    torch, dynamo and the engine are imported (~3 s of CPU, ~8 s under load, that a fresh interpreter pays)."""
    from tests.engine.reliability.harness import ForkServer

    server = ForkServer()
    yield server
    server.close()


def run_forked(forks, *args: str, cwd: Path | None = None, timeout: float = 120, module: str = "tui.cli",
               faults: str = "", path: list[str] | None = None) -> subprocess.CompletedProcess:
    """``run_cli`` for a test whose point is what a run does, not how an interpreter starts: the same
    ``sensorlm-tui args…`` (``module="engine"``: ``python -m engine args…``), stdin closed, run in a process
    forked from ``forks`` (the session's preloaded server); ``faults`` is its SENSORLM_TUI_FAULTS, ``path`` goes
    first on its sys.path (a plugin's site directory, as PYTHONPATH would put it). Fails the test
    (killing the process) when it outlives ``timeout`` s. Start-up itself stays covered by the tests that run
    the real entry point (run_cli, the hostile corpus's real-CLI cases, the start-up signal cases)."""
    import tempfile

    entry = {"tui.cli": "cli", "engine": "engine"}[module]
    with tempfile.TemporaryDirectory(prefix="forked-") as io:
        proc = forks.spawn(list(args), Path(io), faults=faults, entry=entry, cwd=cwd or ROOT, path=path)
        code = proc.wait(timeout)
        return subprocess.CompletedProcess([module, *args], code, proc.out.read_text(errors="replace"),
                                           proc.stderr())


def program(cwd: Path | None = None) -> str:
    """How the commands a CLI started in ``cwd`` (default: ROOT, as ``run_cli``) prints begin: the program as it
    runs from there (engine.core.invocation)."""
    import contextlib

    from engine.core.invocation import program as here

    with contextlib.chdir(cwd or ROOT):
        return here()


def output(proc: subprocess.CompletedProcess, tail: int = 4000) -> str:
    """A finished process's exit code and the tails of its stdout and stderr, as plain text for an assert's
    message (a tuple would be cut to one line by pytest's repr, hiding the traceback that says why)."""
    return (f"exit {proc.returncode}\n--- stdout ---\n{(proc.stdout or '')[-tail:]}\n"
            f"--- stderr ---\n{(proc.stderr or '')[-tail:]}")


def kill_at_checkpoint_and_resume(flags: list[str], run: Path, step: int, kill_wait: float = 60,
                                  timeout: float = 120, forks=None) -> subprocess.CompletedProcess:
    """Train ``flags`` into ``run``, SIGKILL it the moment the step-``step`` checkpoint is reported (what a
    crash leaves behind), then ``train --resume`` it headless; returns the finished resume. The run's stdout is
    a pipe read line by line, so the kill lands right after the line. Both processes are forked from ``forks``
    when given (``run_forked``; the pipe is then a FIFO the forked run writes), else fresh interpreters."""
    argv = [*flags, "--run-dir", str(run), "--set", "train.print_every=1"]
    if forks is None:
        proc = subprocess.Popen([sys.executable, "-m", "tui.cli", *argv], cwd=ROOT, env=cli_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
        _kill_at_line(proc.stdout, proc.pid, f"ckpt  step {step} last")
        assert proc.wait(timeout=kill_wait) == -signal.SIGKILL
    else:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="forked-") as io:
            os.mkfifo(Path(io) / "pipe")
            proc = forks.spawn(argv, Path(io), entry="cli", cwd=ROOT, stdout=Path(io) / "pipe")
            with open(Path(io) / "pipe") as pipe:  # opens once the run opens its end (its first instruction)
                _kill_at_line(pipe, proc.pid, f"ckpt  step {step} last")
                assert proc.wait(kill_wait) == -signal.SIGKILL, proc.stderr()[-2000:]
    args = ("train", "--resume", str(run), "--headless")
    resumed = run_forked(forks, *args, timeout=timeout) if forks else run_cli(*args, timeout=timeout)
    assert resumed.returncode == 0, resumed.stderr
    return resumed


def _kill_at_line(lines, pid: int, prefix: str) -> None:
    """SIGKILL ``pid`` at the first of ``lines`` (its stdout, read as written) that starts with ``prefix``."""
    for line in lines:
        if line.startswith(prefix):
            os.kill(pid, signal.SIGKILL)
            return


def wait_until(condition: Callable[[], object], timeout: float = 60.0, what: str = "condition",
               interval: float = 0.1):
    """Poll ``condition`` until it returns something truthy and return that; fail the test, naming ``what``,
    after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def holds_for(condition: Callable[[], object], seconds: float, what: str, interval: float = 0.05) -> None:
    """Check ``condition`` every ``interval`` s for ``seconds`` s and fail at its first breach, naming ``what``.

    For a test whose point is that nothing happens for a while: the window *is* the behaviour under test, so it
    cannot be a wait on a condition; checking all through it (rather than once, after a sleep) fails at the
    moment the thing happens and says when."""
    start = time.monotonic()
    while True:
        elapsed = time.monotonic() - start
        if not condition():
            pytest.fail(f"{what}: broken {elapsed:.2f} s into the {seconds:g} s window")
        if elapsed >= seconds:
            return
        time.sleep(min(interval, seconds - elapsed))


def log_events(run_dir: Path) -> list[dict]:
    """Every complete record of a run's events.jsonl, as written: its step lines come at the log's cadence
    (engine.run.sinks.STEP_LINE_S: a line a second, the first, the last and every skipped step)."""
    out = []
    for line in (Path(run_dir) / "events.jsonl").read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


#: The StepLogged fields the record stores as integers or a flag (the rest are numbers, as in a step line).
_INT_FIELDS, _FLAG_FIELDS = {"epoch", "batch_size"}, {"skipped"}


def record_steps(run_dir: Path) -> list[dict] | None:
    """Every step of the run's step record (through the public reader, sensorlm_tui.steps), each as a step line
    of events.jsonl would give it: ``{"type": "step", "step", "t", "loss", ..., "components": {...}}`` (a
    component only on the steps that logged it). None when the run has no record."""
    from sensorlm_tui.steps import open_record

    try:
        record = open_record(run_dir)
    except FileNotFoundError:
        return None
    with record:
        rows = {step: {"type": "step", "step": step, "components": {}} for step in record.steps().tolist()}
        for name in record.names():
            steps, values = record.window(name, 0, 2**62)
            for step, value in zip(steps.tolist(), values.tolist()):
                row = rows[step]
                if name.startswith("components."):
                    row["components"][name[len("components."):]] = value
                else:
                    row[name] = int(value) if name in _INT_FIELDS else bool(value) if name in _FLAG_FIELDS else value
    return list(rows.values())


def read_events(run_dir: Path) -> list[dict]:
    """The run's events: events.jsonl's, with every step the step record holds in place of the log's step lines
    (the log keeps one a second), each where its time puts it among the others. A run without a record (an old
    one, or one that could not open it) gives its log as written: every step is a line of it then; so do the
    steps an old run logged before this version resumed it (below the record's first step)."""
    logged = log_events(run_dir)
    steps = record_steps(run_dir)
    if steps is None:
        return logged
    first = steps[0]["step"] if steps else float("inf")
    out, at = [], 0
    for event in logged:
        if event.get("type") == "step" and event.get("step", 0) >= first:
            continue
        while at < len(steps) and steps[at]["t"] <= event.get("t", float("inf")):
            out.append(steps[at])
            at += 1
        out.append(event)
    return out + steps[at:]


def pytest_collection_modifyitems(config, items):
    """The `slow` tests first, each group in its own order, so two workers end together: a 20-40 s job left for the
    end kept one core idle that long while the other finished it. Then skip `gpu` tests without CUDA (checked
    lazily so collecting tests never imports torch)."""
    items.sort(key=lambda item: "slow" not in item.keywords)  # stable: the same order on every worker
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if not has_cuda:
        skip = pytest.mark.skip(reason="needs CUDA (no GPU on this machine)")
        for item in gpu_items:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def inductor_cache(tmp_path_factory):
    """One TORCHINDUCTOR_CACHE_DIR for the whole session (subprocesses inherit it through cli_env): inductor's
    first compile of a graph costs ~25 s of C++ compiling on the 2-core box, a cache hit a fraction of that.
    A fresh directory per session keeps dynamo's saved dynamic-shape decisions (they live there too) from
    leaking between sessions; a directory set by the caller (CI's cache) is kept."""
    if "TORCHINDUCTOR_CACHE_DIR" in os.environ:
        yield os.environ["TORCHINDUCTOR_CACHE_DIR"]
        return
    path = str(tmp_path_factory.mktemp("inductor"))
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = path
    try:
        yield path
    finally:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
