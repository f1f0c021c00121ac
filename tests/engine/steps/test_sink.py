"""The record behind the drainer: a pass's steps in one batch, on disk before an urgent event returns, a resumed
run's abandoned steps dropped, a full disk retried without losing steps; events.jsonl's step lines at a cadence."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from engine.run import events as ev
from engine.run.offthread import OffThreadSinks, run_records
from engine.run.rundir import RunDir
from engine.run.sinks import STEP_LINE_S, JsonlSink
from engine.run.steps import open_record, record_dir
from engine.run.steps.sink import RecordSink

FOREVER = 3600.0


def test_run_records_write_every_step_to_the_record_and_an_urgent_event_finds_them_on_disk(tmp_path):
    run = RunDir(tmp_path)
    run.create()
    status, records = run_records(run, JsonlSink(run.events))
    assert any(isinstance(sink, RecordSink) for sink in records.sinks)
    for step in range(1, 51):
        records(ev.StepLogged(step=step, loss=1.0 / step, components={"mse": 0.5}))
    records(ev.CheckpointSaved(step=50, path="ckpt", kind="last"))  # urgent: drained before emit returns
    record = open_record(tmp_path)
    assert record.steps().tolist() == list(range(1, 51)) and record.names()[-1] == "components.mse"
    records(ev.RunStarted(start_step=30, resumed_from="ckpt"))  # a resume from step 30 drops 31..50
    for step in range(31, 41):
        records(ev.StepLogged(step=step, loss=2.0))
    records.close()
    steps, loss = open_record(tmp_path).window("loss", 0, 100)
    assert steps.tolist() == list(range(1, 41)) and loss[-10:].tolist() == [2.0] * 10
    assert open_record(tmp_path).series("loss").summarised == 40  # close brought the pyramid up to date
    status.stop()


def test_a_start_step_of_zero_never_wipes_the_record(tmp_path):
    sink = RecordSink(record_dir(tmp_path))
    for step in range(1, 11):
        sink(ev.StepLogged(step=step, loss=1.0))
    sink.drained()
    sink(ev.RunStarted(start_step=0))  # a framework that does not say where it resumed
    sink.close()
    assert open_record(tmp_path).rows == 10


def test_the_drainer_hands_a_pass_to_the_record_as_one_batch(tmp_path):
    sink = RecordSink(record_dir(tmp_path))
    batches = []
    write = sink.writer.flush
    sink.writer.flush = lambda: (batches.append(sink.writer.pending), write())[1]  # (counts each batch's rows)
    records = OffThreadSinks([sink], interval=FOREVER).start()
    for step in range(1, 201):
        records(ev.StepLogged(step=step, loss=1.0))
    records.drain()
    records.close()
    assert batches[0] == 200 and open_record(tmp_path).rows == 200


def _mount(*args: str) -> None:
    result = subprocess.run(["mount", *args], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount here ({result.stderr.strip()}); needs root with CAP_SYS_ADMIN")


def test_a_full_disk_keeps_the_steps_in_memory_and_writes_them_once_it_has_room(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    _mount("-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk))
    try:
        notes: list[str] = []
        sink = RecordSink(disk / "steps", warn=notes.append)
        step = 0
        while not notes and step < 100_000:
            for _ in range(200):
                step += 1
                sink(ev.StepLogged(step=step, loss=float(step), components={"a": 1.0, "b": 2.0}))
            sink.drained()
        assert notes and "cannot write the step record" in notes[0] and sink.writer.pending > 0
        for _ in range(200):
            step += 1
            sink(ev.StepLogged(step=step, loss=float(step), components={"a": 1.0, "b": 2.0}))
        sink.drained()  # still full: kept, one warning only
        assert len(notes) == 1
        _mount("-o", "remount,size=8m", str(disk))
        sink.drained()
        assert "writable again" in notes[-1]
        sink.close()
        steps, loss = open_record(disk).window("loss", 0, 10**9)
        assert steps.tolist() == list(range(1, step + 1)) and loss.tolist() == list(map(float, steps))
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def test_step_lines_at_a_cadence_keep_the_first_last_and_skipped_steps(tmp_path):
    jsonl = JsonlSink(tmp_path / "events.jsonl", step_every_s=1.0)
    jsonl(ev.RunStarted(total_steps=500, t=100.0))
    for step in range(1, 501):  # 100 steps a second for 5 s
        jsonl(ev.StepLogged(step=step, t=100.0 + step / 100, skipped=step == 123))
    jsonl.close()
    lines = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert lines[0] == {"type": "schema", "t": lines[0]["t"], "version": 3, "writer": "sensorlm-tui"}
    assert [e["step"] for e in lines if e["type"] == "step"] == [1, 101, 123, 223, 323, 423, 500]
    every = JsonlSink(tmp_path / "all.jsonl", step_every_s=0)  # no cadence: every step's line
    for step in range(1, 11):
        every(ev.StepLogged(step=step, t=100.0))
    every.close()
    assert sum('"type":"step"' in line for line in (tmp_path / "all.jsonl").read_text().splitlines()) == 10


def _step_lines(run: RunDir) -> list[int]:
    return [e["step"] for e in map(json.loads, run.events.read_text().splitlines()) if e["type"] == "step"]


def test_a_run_logs_a_step_line_a_second_and_records_every_step(tmp_path):
    run = RunDir(tmp_path)
    run.create()
    status, records = run_records(run, JsonlSink(run.events))  # the engine's records, at the default cadence
    records(ev.RunStarted(total_steps=3000))
    began = time.time()
    for step in range(1, 3001):  # as fast as the bus takes them: a few seconds at most, however loaded the box
        records(ev.StepLogged(step=step, loss=1.0 / step))
    records.close()
    status.stop()
    seconds = time.time() - began
    lines = _step_lines(run)
    assert lines[0] == 1 and lines[-1] == 3000 and len(lines) <= seconds / STEP_LINE_S + 2, (len(lines), seconds)
    assert open_record(tmp_path).steps().tolist() == list(range(1, 3001))


def test_a_run_without_a_step_record_keeps_every_step_line(tmp_path):
    run = RunDir(tmp_path)
    run.create()
    record_dir(tmp_path).write_text("a file where the record's directory goes")  # the record cannot be opened
    status, records = run_records(run, JsonlSink(run.events))
    for step in range(1, 201):
        records(ev.StepLogged(step=step, loss=1.0))
    records.close()
    status.stop()
    assert _step_lines(run) == list(range(1, 201))
