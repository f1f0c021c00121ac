"""The writer: torn tails ignored, redo keeps the last attempt, names mid-run, sparse names, promotion, types."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from engine.run import events as ev
from engine.run.steps import StepWriter, open_record
from engine.run.steps.envelope import column_edges
from engine.run.steps.layout import COUNT_AT, HEADER, read_count


def _write(directory, steps, **extra):
    writer = StepWriter(directory)
    for step in steps:
        writer.append(step, {"loss": step / 10, **{k: f(step) for k, f in extra.items()}})
    writer.close()


def test_a_torn_tail_past_every_count_is_ignored_and_appends_continue_after_the_last_complete_row(tmp_path):
    _write(tmp_path, range(1, 101), sparse=lambda s: s * 2.0)
    # What a writer killed inside a batch leaves: values and steps past the commit, half a step, half a
    # catalogue line, and a series count raised before the rows' commit.
    with open(tmp_path / "step.i8", "ab") as out:
        out.write(np.arange(500, 510, dtype="<i8").tobytes() + b"\x07\x00\x00")
    with open(tmp_path / "0.v", "ab") as out:
        out.write(np.full(10, 99, "<f4").tobytes())
    fd = os.open(tmp_path / "0.v", os.O_RDWR)
    os.pwrite(fd, (110).to_bytes(8, "little"), COUNT_AT)
    os.close(fd)
    with open(tmp_path / "catalog.jsonl", "ab") as out:
        out.write(b'{"id":7,"name":"tor')
    record = open_record(tmp_path)
    assert (record.rows, record.last_step, record.names()) == (100, 100, ["loss", "sparse"])
    assert record.window("loss", 95, 1000)[0].tolist() == [95, 96, 97, 98, 99, 100]
    writer = StepWriter(tmp_path)  # repairs the counts, terminates the torn line
    writer.append(101, {"loss": 10.1, "fresh": 1.0})
    writer.close()
    record = open_record(tmp_path)
    steps, loss = record.window("loss", 1, 1000)
    assert steps.tolist() == list(range(1, 102))
    np.testing.assert_allclose(loss, np.arange(1, 102) / 10, rtol=1e-6)
    assert record.names() == ["loss", "sparse", "fresh"]


def test_a_step_at_or_below_the_last_one_redoes_from_there_and_the_last_attempt_wins(tmp_path):
    writer = StepWriter(tmp_path)
    for step in range(1, 201):
        writer.append(step, {"loss": 1.0, "late": 5.0} if step > 150 else {"loss": 1.0})
    writer.flush()
    for step in range(120, 131):  # a rollback to a checkpoint of step 119, in the same batch as a repeat
        writer.append(step, {"loss": 2.0})
    writer.append(130, {"loss": 3.0})
    writer.close()
    record = open_record(tmp_path)
    steps, loss = record.window("loss", 0, 10_000)
    assert steps.tolist() == list(range(1, 131))
    assert loss.tolist() == [1.0] * 119 + [2.0] * 10 + [3.0]
    assert record.window("late", 0, 10_000)[0].tolist() == []  # its steps were all redone without it
    assert record.envelope("loss", 1, 130, 1).max.tolist() == [3.0]


def test_truncate_after_drops_the_rows_a_resumed_run_redoes(tmp_path):
    _write(tmp_path, range(1, 301), every3=lambda s: float(s))
    writer = StepWriter(tmp_path)
    writer.truncate_after(250)
    writer.append(251, {"loss": -1.0})
    writer.close()
    record = open_record(tmp_path)
    assert record.window("loss", 240, 400)[0].tolist() == list(range(240, 252))
    assert record.window("every3", 240, 400)[0].tolist() == list(range(240, 251))


def test_names_can_appear_mid_run_and_sparse_names_keep_only_their_steps(tmp_path):
    writer = StepWriter(tmp_path)
    for step in range(1, 1001):
        values = {"loss": 1.0 / step}
        if step >= 400:
            values["components.late"] = step * 1.0  # every row from 400 on: promoted to dense at 128 values
        if step % 97 == 0:
            values.update({f"layer{i}.norm": step + i for i in range(50)})  # many names, sparse
        writer.append(step, values)
        if step % 37 == 0:
            writer.flush()
    writer.close()
    record = open_record(tmp_path)
    assert record.names() == ["loss", *(f"layer{i}.norm" for i in range(50)), "components.late"]
    late = record.series("components.late")
    assert late.kind == "dense" and np.asarray(late.steps).tolist() == list(range(400, 1001))
    assert np.asarray(late.values).tolist() == list(map(float, range(400, 1001)))
    sparse = record.series("layer7.norm")
    assert sparse.kind == "sparse" and np.asarray(sparse.steps).tolist() == list(range(97, 1001, 97))
    assert record.envelope("layer7.norm", 1, 1000, 2).max.tolist() == [485 + 7, 970 + 7]
    table = record.columns(["loss", "layer7.norm"], 96, 98)
    assert table["step"].tolist() == [96, 97, 98]
    assert np.isnan(table["layer7.norm"][[0, 2]]).all() and table["layer7.norm"][1] == 104
    # 1000 rows × 4 B for the dense names, 12 B a value for the sparse ones: nothing like 52 dense columns
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) < 120_000


def test_step_events_keep_their_fields_with_the_types_chosen_for_them(tmp_path):
    writer = StepWriter(tmp_path)
    event = ev.StepLogged(step=7, epoch=2, loss=0.1234567, lr=3e-4, grad_norm=float("nan"), samples_per_s=512.0,
                          steps_per_s=16.0, batch_size=32, components={"mse": 0.5}, skipped=True, t=1.7e9 + 0.001)
    writer.append_event(event)
    writer.append(8, {"tokens": float(3 << 30)})  # an integer past 2**24: float64, kept exact
    writer.close()
    record = open_record(tmp_path)
    types = {name: record.series(name).dtype.str for name in record.names()}
    assert types == {"t": "<f8", "epoch": "<i4", "batch_size": "<i4", "skipped": "|u1", "loss": "<f4", "lr": "<f4",
                     "grad_norm": "<f4", "samples_per_s": "<f4", "steps_per_s": "<f4", "tokens_per_s": "<f4",
                     "mfu": "<f4", "components.mse": "<f4", "tokens": "<f8"}
    table = record.columns()
    assert table["t"][0] == 1.7e9 + 0.001 and table["epoch"][0] == 2 and table["skipped"][0] == 1
    assert table["tokens"][1] == float(3 << 30) and np.isnan(table["grad_norm"][0])
    assert table["loss"][0] == np.float32(0.1234567)


def test_a_reader_follows_a_live_writer_by_what_it_appended(tmp_path):
    writer = StepWriter(tmp_path)
    for step in range(1, 51):
        writer.append(step, {"loss": float(step)})
    writer.flush()
    record = open_record(tmp_path)
    assert (record.rows, record.refresh()) == (50, False)
    for step in range(51, 81):
        writer.append(step, {"loss": float(step), "new": 1.0})
    writer.flush()
    assert record.rows == 50 and record.window("loss", 0, 100)[0][-1] == 50  # the snapshot holds until refresh
    assert record.refresh() and (record.rows, record.last_step) == (80, 80)
    assert record.names() == ["loss", "new"] and record.envelope("loss", 1, 80, 1).max.tolist() == [80.0]
    writer.close()


def test_a_record_that_is_not_there_is_a_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no step record"):
        open_record(tmp_path)


def test_counts_are_committed_in_each_file_header(tmp_path):
    _write(tmp_path, range(1, 11))
    fd = os.open(tmp_path / "step.i8", os.O_RDONLY)
    assert read_count(fd) == 10 and os.fstat(fd).st_size == HEADER + 80
    os.close(fd)
    lines = [json.loads(line) for line in (tmp_path / "catalog.jsonl").read_text().splitlines()]
    assert lines[0]["format"] and lines[1] == {"id": 0, "name": "loss", "dtype": "<f4", "kind": "dense", "start": 0}


def test_a_batch_of_more_series_than_open_files_commits_every_row(tmp_path):
    """A thousand names in one batch open more files than the writer keeps open: the step file's descriptor is
    closed and reopened like the others, and every row is committed (the commit went to a closed descriptor)."""
    from engine.run.steps.writer import OPEN_FILES

    names = [f"layer{i}.grad" for i in range(OPEN_FILES)]
    writer = StepWriter(tmp_path)
    writer.append_columns(np.arange(1, 301), {name: np.full(300, i, np.float32) for i, name in enumerate(names)})
    for step in range(301, 311):
        writer.append(step, {name: float(step) for name in names})
    writer.close()
    record = open_record(tmp_path)
    assert record.rows == 310 and record.last_step == 310
    steps, values = record.window(names[-1], 1, 310)
    assert steps.tolist() == list(range(1, 311)) and values[:300].tolist() == [OPEN_FILES - 1.0] * 300


def test_a_reader_following_a_redo_and_a_reader_without_the_step_index_answer_as_a_fresh_one(tmp_path):
    writer = StepWriter(tmp_path)
    for step in range(1, 5001):
        writer.append(step, {"loss": float(step)})
    writer.flush()
    following = open_record(tmp_path)
    assert following.window("loss", 2000, 2002)[0].tolist() == [2000, 2001, 2002]  # (its coarse index is read)
    writer.truncate_after(1000)
    for step in range(1001, 9001, 2):  # the redo logs other steps than the abandoned attempt
        writer.append(step, {"loss": -float(step)})
    writer.close()
    assert following.refresh() and following.rows == 1000 + 4000
    fresh = open_record(tmp_path)
    (tmp_path / "step.idx").unlink()
    unindexed = open_record(tmp_path)  # a record without the index: its sample is read value by value
    steps = np.array([*range(1, 1001), *range(1001, 9001, 2)])
    loss = np.where(steps <= 1000, steps, -steps).astype(float)
    edges = np.searchsorted(steps, column_edges(1, 9000, 7))
    want = [loss[a:b].min() for a, b in zip(edges[:-1], edges[1:])]
    for record in (following, fresh, unindexed):
        assert record.window("loss", 1999, 2004)[0].tolist() == [1999, 2001, 2003]
        got = record.envelope("loss", 1, 9000, 7)
        assert got.count.tolist() == np.diff(edges).tolist() and got.min.tolist() == want
