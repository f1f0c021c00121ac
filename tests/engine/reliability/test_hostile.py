"""The hostile-input corpus (tests/hostile/), by surface: every case a clean one-line error, exit 2, nothing changed.

One parametrised test runs each case in a real process forked from the
preloaded server: ``engine.app.main.main`` (what ``python -m engine`` runs)
or, for a command (``plot``, ``export``, ``presets``, ``data gapfill``),
``tui.cli.main`` (the ``sensorlm-tui`` console script). It checks: exit code 2,
exactly one stderr line ``sensorlm-tui: error: <place>: <what>`` containing
the case's expected text, no traceback, nothing on stdout but start-up phases, within the case's time
(10 s unless it says otherwise: a FIFO must never be a hang), and an
identical tree before and after (the case's work area, the corpus file).

A case is a file (config, CSV, checkpoint: the file is the input) or, for
what git cannot hold (a FIFO, a link to /dev/zero, a sparse 3 GB file, a
model directory or a plugin with one thing wrong), a builder in
tests/hostile/builders.py (the run directory's own cases: tests/hostile/run_dirs.py) that makes it in the
work area; a case marked ``root`` (a directory another uid owns) is skipped, saying so, without root. A few config
cases also go through the real ``sensorlm-tui train``
command, and one proves the checkpoint corpus is not stale (its valid
control file resumes). Control-channel cases are requests sent to one live
engine: each is refused with its reason and the run goes on. Start-up signal cases are signals sent to real
``python -m engine`` processes while they import torch, all started at once: each ends in one line and exit
130, or trains on to exit 0.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from tests.conftest import ROOT, cli_env, run_cli
from tests.hostile import builders, run_dirs
from tests.hostile.builders import Bases

CORPUS = ROOT / "tests" / "hostile"
CASES = tomllib.loads((CORPUS / "cases.toml").read_text())
BUILDERS = {**builders.BUILDERS, **run_dirs.BUILDERS}
#: Sections with a runner of their own (below): requests to a live engine, signals to a starting one.
OWN_RUNNERS = ("control", "startup_signals")
IDS = [f"{kind}/{name}" for kind, cases in CASES.items() if kind not in OWN_RUNNERS for name in cases]
CSV_FLAGS = ["--task", "sensorlm", "--set", "sensorlm.data.channels=2", "--set", "sensorlm.model.patch_channels=2"]
#: Files larger than this are compared by size and modification time (a sparse 3 GB case is not read).
_HASHED_BYTES = 64 << 20


def _tree_digest(*roots: Path) -> dict[str, str]:
    """path → what it is (sha256 of a file, '<dir>', '<fifo>', a link's target) for everything under ``roots``."""
    out = {}
    for root in roots:
        for path in sorted([root, *root.rglob("*")]):
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                out[str(path)] = f"-> {os.readlink(path)}"
            elif stat.S_ISDIR(info.st_mode):
                out[str(path)] = "<dir>"
            elif not stat.S_ISREG(info.st_mode):
                out[str(path)] = f"<special {stat.S_IFMT(info.st_mode):o}>"
            elif info.st_size > _HASHED_BYTES:
                out[str(path)] = f"{info.st_size} bytes, mtime {info.st_mtime_ns}"
            else:
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _case(kind: str, name: str) -> dict:
    spec = CASES[kind][name]
    return {"expect": spec} if isinstance(spec, str) else spec


def _argv(kind: str, name: str, area: Path) -> list[str]:
    """The engine arguments for a file case; checkpoint cases get their run directory built in ``area``."""
    flags = list(_case(kind, name).get("flags", []))
    source = CORPUS / kind / name
    if kind == "config":
        return ["--config", str(source), "--threads", "1", "--run-dir", str(area / "run"), *flags]
    if kind == "csv":
        return [*CSV_FLAGS, "--data", str(source), "--threads", "1", "--run-dir", str(area / "run"), *flags]
    run = area / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(CORPUS / "checkpoint" / "config.toml", run / "config.toml")
    shutil.copy(source, run / "checkpoints" / "last.safetensors")
    return ["--resume", str(run), *flags]


def _check(code: int, stdout: str, stderr: str, expect: str) -> None:
    assert code == 2, f"exit {code}:\n{stdout[-1500:]}\n{stderr[-1500:]}"
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("sensorlm-tui: error: ") and expect in lines[0], lines[0]
    assert len(lines[0]) < 700, f"a {len(lines[0])}-character error line"
    # stdout holds at most the headless engine's start-up progress (engine.app.startup: `phase …` lines)
    assert all(line.startswith("phase ") for line in stdout.splitlines()), stdout


@pytest.fixture(scope="module")
def bases(engines, tmp_path_factory) -> Bases:
    """The valid inputs built cases damage (built on first use, shared by the module)."""
    return Bases(tmp_path_factory.mktemp("bases"), engines.spawn)


@pytest.mark.slow
@pytest.mark.parametrize("case", IDS)
def test_hostile_input_is_a_one_line_error_and_changes_nothing(engines, bases, tmp_path: Path, case: str) -> None:
    kind, name = case.split("/", 1)
    spec = _case(kind, name)
    if spec.get("root") and os.geteuid() != 0:
        pytest.skip("needs root: the case is a directory another uid (65534) owns")
    area = tmp_path / "area"
    area.mkdir()
    if "build" in spec:
        how = BUILDERS[spec["build"]](area, bases)
        watched = (area,)
    else:
        how = None
        watched = (area, CORPUS / kind)
    argv = how.argv if how else _argv(kind, name, area)
    before = _tree_digest(*watched)
    started = time.monotonic()
    engine = engines.spawn(argv, tmp_path / "io", entry=how.entry if how else "engine", path=how.path if how else [])
    within = spec.get("within", 10)
    code = engine.wait(max(within, 60))  # a hang is killed (and fails) at 60 s; the bound is checked below
    seconds = time.monotonic() - started
    stdout, stderr = "\n".join(engine.lines()), engine.stderr()
    if spec.get("code", 2) == 0:  # a cache that is damaged costs nothing: the command works as without it
        assert code == 0 and stderr == "" and spec["stdout"] in stdout, f"exit {code}: {stderr[-1500:]}"
    else:
        _check(code, stdout, stderr, spec["expect"])
    assert seconds < within, f"{seconds:.1f} s, more than the case's {within} s"
    assert _tree_digest(*watched) == before, "bad input changed files on disk"


# Config errors come before torch is imported, so these cost ~0.5 s each; a checkpoint case goes through the real
# CLI in test_no_unpickling.py, and CSV and checkpoint cases otherwise share every line after prepare() with these.
@pytest.mark.parametrize("case", ["config/unknown_key.toml", "config/deep_nesting.toml", "config/non_utf8.toml"])
def test_hostile_input_through_the_real_cli(tmp_path: Path, case: str) -> None:
    kind, name = case.split("/", 1)
    argv = _argv(kind, name, tmp_path)
    before = _tree_digest(tmp_path, CORPUS / kind)
    result = run_cli("train", *argv, cwd=tmp_path)
    _check(result.returncode, result.stdout, result.stderr, _case(kind, name)["expect"])
    assert _tree_digest(tmp_path, CORPUS / kind) == before


def test_corpus_control_checkpoint_still_resumes(engines, tmp_path: Path) -> None:
    """If this fails the checkpoint format moved on: run tests/hostile/make_checkpoints.py."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(CORPUS / "checkpoint" / "config.toml", run / "config.toml")
    shutil.copy(CORPUS / "checkpoint" / "valid.safetensors", run / "checkpoints" / "last.safetensors")
    engine = engines.spawn(["--resume", str(run), "--max-steps", "5"], tmp_path)
    assert engine.wait(60) == 0, engine.stderr() + "\n(stale corpus? run tests/hostile/make_checkpoints.py)"
    assert engine.wait_for(r"^start .* at step (\d+)").group(1) == "3"


def test_hostile_control_requests_are_refused_with_a_reason_and_the_run_goes_on(engines, tmp_path: Path) -> None:
    """Every [control] case: one request line to a live toy engine's socket; its answer names the reason."""
    from engine.run.control import wire as channel

    run = tmp_path / "run"
    engine = engines.spawn(["--task", "toy", "--threads", "1", "--set", "toy.dim=32", "--eval-every", "0",
                            "--max-steps", "1000000", "--run-dir", str(run)], tmp_path / "io")
    try:
        engine.wait_for(r"^step\s", timeout=60)
        for name, spec in CASES["control"].items():
            line = ("[" * 30_000 if spec["request"] == "DEEP" else spec["request"]).encode() + b"\n"
            sock = channel.connect(run, timeout=10)
            try:
                sock.sendall(line)
                reply = json.loads(channel.read_line(sock, time.monotonic() + 10))
            finally:
                sock.close()
            why = reply.get("why") or reply.get("error") or ""
            assert reply["type"] in ("refused", "error") and spec["expect"] in why and "\n" not in why, (name, reply)
        assert engine.server.wait(engine.pid, 0) is None, "the run stopped"
        deadline, wanted = time.monotonic() + 10, {"c1", "c3", "c4", "c5", "c6", "c7"}  # the log is flushed each second
        while time.monotonic() < deadline:
            refused = {json.loads(x)["request_id"] for x in (run / "events.jsonl").read_text().splitlines()
                       if x.startswith('{"type":"refused"')}
            if refused >= wanted:
                break
            time.sleep(0.2)
        assert refused >= wanted, f"the engine's refusals are events too: {refused}"
    finally:
        engine.signal(9)
        engine.wait(30)


@pytest.mark.slow
def test_signals_while_an_engine_starts_end_it_in_one_line_or_let_it_train(tmp_path: Path) -> None:
    """Every [startup_signals] case: a real ``python -m engine`` each, started together (importing torch is then
    slower still: the signals land in it), signalled once it prints the case's phase; the exit, the line, the run
    directory, and never a traceback."""
    cases = CASES["startup_signals"]
    started = {}
    for name, spec in cases.items():
        area = tmp_path / name
        area.mkdir()
        program = ["tui.cli", "train", "--headless"] if spec.get("entry") == "cli" else ["engine"]
        argv = [sys.executable, "-m", *program, "--task", "toy", "--threads", "1", "--max-steps", "3",
                "--run-dir", str(area / "run"), *spec.get("flags", [])]
        with open(area / "out", "w") as out, open(area / "err", "w") as err:
            started[name] = subprocess.Popen(argv, cwd=area, env=cli_env(), stdin=subprocess.DEVNULL, stdout=out,
                                             stderr=err, start_new_session=True)
    waiting, deadline = dict(cases), time.monotonic() + 240
    while waiting:
        assert time.monotonic() < deadline, f"never printed their phase: {sorted(waiting)}"
        for name, spec in list(waiting.items()):
            if spec.get("at", "phase importing torch") in (tmp_path / name / "out").read_text():
                del waiting[name]
                _send(started[name], spec["signals"])
        time.sleep(0.02)
    failures = []
    for name, spec in cases.items():
        area, process = tmp_path / name, started[name]
        try:
            code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
        stdout, stderr = (area / "out").read_text(), (area / "err").read_text()
        run = area / "run"
        status = json.loads((run / "status.json").read_text()) if (run / "status.json").exists() else {}
        if code != spec["code"] or stderr or spec["stdout"] not in stdout or run.exists() != spec["run_dir"] or \
                (spec["run_dir"] and (status.get("state"), status.get("exit_code")) != ("finished", code)):
            failures.append(f"{name}: exit {code}, run directory {'left' if run.exists() else 'none'}, status "
                            f"{status.get('state')}/{status.get('exit_code')}\n{stdout[-1200:]}\n{stderr[-1500:]}")
    assert not failures, "\n\n".join(failures)


def _send(process: subprocess.Popen, names: list[str]) -> None:
    """The signals ``names``, 50 ms apart, to ``process`` (a process already gone needs no more)."""
    for i, name in enumerate(names):
        if i:
            time.sleep(0.05)
        if process.poll() is not None:
            return
        process.send_signal(getattr(signal, name))
