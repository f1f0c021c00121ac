"""Old runs open: a log of schema ≤ 2 (every step a line) is converted once into the step record, with progress,
never touching the log, resumable after a kill; the v1 fixture runs convert too (the schema migration test)."""

from __future__ import annotations

import hashlib
import shutil
import signal
import subprocess
import sys
import time

import numpy as np

from bench.open_run import write_run
from engine.core import migrate
from engine.run import events as ev
from engine.run.history import read_history
from engine.run.steps import StepWriter, open_record, record_dir
from engine.run.steps.convert import MARKER, adopt, convert, log_holds_every_step, needs_conversion
from tests.conftest import ROOT, cli_env


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_schema_2_log_converts_to_the_record_with_progress_and_the_log_untouched(tmp_path):
    log = write_run(tmp_path / "old", 3000)
    assert '"version":2' in log.read_text().splitlines()[0] and log_holds_every_step(tmp_path / "old")
    before = _digest(log)
    seen: list[tuple[int, int]] = []
    assert needs_conversion(tmp_path / "old")
    convert(tmp_path / "old", progress=lambda done, total: seen.append((done, total)), chunk_bytes=64 << 10)
    assert _digest(log) == before and not needs_conversion(tmp_path / "old")
    size = log.stat().st_size
    assert seen[0] == (0, size) and seen[-1] == (size, size) and len(seen) > 5
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
    history = read_history(log)
    record = open_record(tmp_path / "old")
    assert record.names() == ["t", "epoch", "batch_size", "skipped", "loss", "lr", "grad_norm", "samples_per_s",
                              "steps_per_s", "tokens_per_s", "mfu", "components.mse"]
    assert record.steps().tolist() == history.column("step", "step").astype(int).tolist()
    for name in ("loss", "lr", "grad_norm", "t", "components.mse"):
        want = history.column("step", name)
        got = record.window(name, 0, 10**9)[1]
        np.testing.assert_array_equal(got, want.astype(record.series(name).dtype))


def test_the_v1_fixture_runs_convert_and_a_resumed_log_keeps_the_last_attempt(tmp_path):
    for name in ("toy_v1", "sensorlm_v1"):
        run = tmp_path / name
        shutil.copytree(ROOT / "tests" / "fixtures" / "runs_v1" / name, run)
        assert log_holds_every_step(run)  # schema 1: every step in the log
        convert(run)
        steps = [e.step for e in read_history(run / "events.jsonl") if e.type == "step"]
        assert open_record(run).steps().tolist() == steps == [1, 2, 3, 4]
    run = tmp_path / "resumed"
    run.mkdir()
    first = [ev.StepLogged(step=s, loss=1.0) for s in range(1, 121)]
    second = [ev.RunStarted(start_step=100)] + [ev.StepLogged(step=s, loss=2.0) for s in range(101, 151)]
    lines = [ev.to_json(event) for event in [ev.Schema(version=2), *first, *second]]
    (run / "events.jsonl").write_text("\n".join(lines) + "\n")
    convert(run)
    steps, loss = open_record(run).window("loss", 0, 1000)
    assert steps.tolist() == list(range(1, 151)) and loss.tolist() == [1.0] * 100 + [2.0] * 50


def test_a_record_the_engine_wrote_is_left_alone_and_a_schema_3_log_is_known(tmp_path):
    writer = StepWriter(record_dir(tmp_path))
    writer.append(1, {"loss": 5.0})
    writer.close()
    (tmp_path / "events.jsonl").write_text(ev.to_json(ev.Schema()) + "\n" + ev.to_json(ev.StepLogged(step=1)) + "\n")
    assert ev.SCHEMA_VERSION == migrate.STEP_RECORD_SCHEMA == 3 and not log_holds_every_step(tmp_path)
    assert not needs_conversion(tmp_path)
    convert(tmp_path)
    assert open_record(tmp_path).window("loss", 0, 9)[1].tolist() == [5.0]
    assert not (tmp_path / "steps" / MARKER).exists()


# Small chunks: a conversion is ~1,000 commits, so a kill lands inside one whatever the machine's speed.
CHILD = ("import sys; from engine.run.steps.convert import convert; print('go', flush=True); "
         "convert(sys.argv[1], chunk_bytes=4 << 10)")


def test_a_conversion_killed_at_random_points_resumes_with_no_lost_and_no_duplicated_step(tmp_path):
    log = write_run(tmp_path / "old", 20_000)
    before = _digest(log)
    rng = np.random.default_rng(5)
    cut_short = 0
    for _ in range(6):
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "old")], env=cli_env(),
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "go"
        time.sleep(float(rng.uniform(0.0, 0.3)))
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        if (record_dir(tmp_path / "old") / "step.i8").exists():
            steps = open_record(tmp_path / "old").steps()
            assert steps.tolist() == list(range(1, len(steps) + 1))  # a prefix of the run, every step once
            cut_short += len(steps) < 20_000
    assert cut_short  # (the kills landed inside the conversion)
    convert(tmp_path / "old")
    assert _digest(log) == before
    record = open_record(tmp_path / "old")
    assert record.steps().tolist() == list(range(1, 20_001))
    want = read_history(log).column("step", "loss").astype(np.float32)
    np.testing.assert_array_equal(record.window("loss", 0, 10**9)[1], want)


class _Stop(Exception):
    pass


def test_adopt_carries_on_a_viewers_conversion_redoes_a_torn_one_and_leaves_a_new_log_alone(tmp_path):
    """The engine's step before it resumes an old run (engine.run.offthread): a record a viewer converted is
    taken as it is, one a kill left with rows past its marker keeps every step once, and then it is the engine's."""
    from tui.model import step_open

    viewed = tmp_path / "viewed"
    write_run(viewed, 500)
    step_open.convert(viewed)
    before = _digest(record_dir(viewed) / "step.i8")
    assert adopt(viewed) == 0 and _digest(record_dir(viewed) / "step.i8") == before  # not converted twice
    assert not (record_dir(viewed) / MARKER).exists() and step_open.plan(viewed) == "record"

    torn = tmp_path / "torn"
    log = write_run(torn, 3000)
    marks: list[str] = []

    def stop_after_four(done: int, total: int) -> None:
        marks.append((record_dir(torn) / MARKER).read_text())
        if len(marks) == 5:
            raise _Stop

    try:
        convert(torn, progress=stop_after_four, chunk_bytes=8 << 10)
    except _Stop:
        pass
    (record_dir(torn) / MARKER).write_text(marks[2])  # killed between a chunk's rows and its marker, twice over
    committed = open_record(torn).rows
    assert 0 < committed < 3000
    assert adopt(torn) == 3000 - committed and not (record_dir(torn) / MARKER).exists()
    record = open_record(torn)
    assert record.steps().tolist() == list(range(1, 3001))
    want = read_history(log).column("step", "loss").astype(np.float32)
    np.testing.assert_array_equal(record.window("loss", 0, 10**9)[1], want)
    assert adopt(torn) == 0 and step_open.plan(torn) == "record"

    fresh = tmp_path / "fresh"  # this version's runs: an empty log, or a schema 3 one whose record is not out yet
    fresh.mkdir()
    (fresh / "events.jsonl").write_bytes(b"")
    assert adopt(fresh) == 0
    (fresh / "events.jsonl").write_text(ev.to_json(ev.Schema()) + "\n" + ev.to_json(ev.StepLogged(step=1)) + "\n")
    assert adopt(fresh) == 0 and not record_dir(fresh).exists()
