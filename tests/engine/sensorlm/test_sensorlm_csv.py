"""CSV format: a synthetic day survives a round trip bit-exactly, and malformed files fail with file:line:column."""

from __future__ import annotations

import re
from datetime import datetime

import numpy as np
import pytest
import torch

from engine.core.config import load
from engine.tasks.protocol import TaskError
from engine.tasks.sensorlm import SensorLMTask
from engine.tasks.sensorlm.csv_data import read_captions, read_series, windows, write_captions, write_csv
from engine.tasks.sensorlm.data import SyntheticWearables

torch.set_num_threads(1)
START = datetime(2024, 3, 1)


def _days(n: int, channels: int = 8):
    gen = SyntheticWearables(seed=1, channels=channels, minutes=1440)
    samples = [gen.sample(i) for i in range(n)]
    return samples, np.concatenate([s.values for s in samples]), [c.name for c in gen.channels]


def test_round_trip_of_synthetic_days(tmp_path):
    samples, values, names = _days(3)
    path = tmp_path / "days.csv"
    write_csv(path, START, values, names)
    series = read_series(path)
    assert series.channels == names and series.origin == START
    assert np.array_equal(series.values, values, equal_nan=True)
    wins = windows(series, 1440)
    assert [w.start for w in wins] == [datetime(2024, 3, d) for d in (1, 2, 3)]
    for w, s in zip(wins, samples):
        assert np.array_equal(w.values, s.values, equal_nan=True) and np.array_equal(w.valid, s.valid)


def test_csv_task_gives_the_same_tensors(tmp_path):
    samples, values, names = _days(4)
    data, caps = tmp_path / "days.csv", tmp_path / "captions.csv"
    write_csv(data, START, values, names)
    write_captions(caps, [(datetime(2024, 3, 1), "Slept 7.5 hours. A 30-minute run around 07:10.")])
    overrides = {"data": {"path": str(data)},
                 "sensorlm": {"data": {"captions_path": str(caps), "channels": 8, "val_fraction": 0.25},
                              "model": {"patch_channels": 4}}}
    task = SensorLMTask(load(preset="demo", overrides=overrides))
    task.setup()
    assert task.train_size() == 3 and task.val_indices() == [0]
    batch = task.make_batch([0, 1, 2], step=0, train=True)
    stacked = np.stack([s.values for s in samples[:3]])
    ok = ~np.isnan(stacked)
    # Statistics come from the training windows only.
    mean = np.nanmean(stacked.reshape(-1, 8).astype(np.float64), axis=0)
    assert np.allclose(task.mean, mean, rtol=1e-5, atol=1e-4)
    expected = np.where(ok, (stacked - task.mean) / task.std, 0).astype(np.float32)
    assert torch.equal(batch["x"], torch.from_numpy(expected))
    assert torch.equal(batch["valid"], torch.from_numpy(ok))
    assert task.caption_of(0) == "Slept 7.5 hours. A 30-minute run around 07:10."
    assert task.caption_of(1)  # generated from its signals
    val = task.make_batch([0], 0, train=False)
    assert torch.equal(val["valid"][0], torch.from_numpy(~np.isnan(samples[3].values)))
    # Task state round trip: same stats, same tokenizer, same tensors.
    again = SensorLMTask(load(preset="demo", overrides=overrides))
    again.setup(task.state_dict())
    assert torch.equal(again.make_batch([0, 1], 5, True)["tokens"], task.make_batch([0, 1], 5, True)["tokens"])


GOOD_HEADER = "timestamp,heart_rate,steps\n"


@pytest.mark.parametrize("content, line, column, words", [
    (b"", 1, 1, "empty file"),
    (b"time,heart_rate\n2024-03-01T00:00,60\n", 1, 1, "first column must be 'timestamp'"),
    (b"timestamp,hr,hr\n", 1, 14, "duplicate column"),
    ((GOOD_HEADER + "2024-03-01T00:00,60,0\n2024-03-01T00:01,61,0,9\n").encode(), 3, 23, "expected 3 columns"),
    ((GOOD_HEADER + "2024-03-01T00:00,60\n").encode(), 2, 20, "expected 3 columns"),
    ((GOOD_HEADER + "2024-03-01T00:00,60,0\n2024-03-01T00:01,abc,0\n").encode(), 3, 18, "is not a number"),
    ((GOOD_HEADER + "2024-03-01T00:00,NaN,0\n").encode(), 2, 18, "not finite"),
    ((GOOD_HEADER + "2024-03-01T00:00,60,inf\n").encode(), 2, 21, "not finite"),
    (GOOD_HEADER.encode() + b"2024-03-01T00:00,6\xff0,0\n", 2, 19, "not valid UTF-8"),
    ((GOOD_HEADER + "2024-03-01T00:00," + "1" * 70000 + ",0\n").encode(), 2, 65537, "line longer than"),
    ((GOOD_HEADER + "2024-03-01T00:05,60,0\n2024-03-01T00:04,60,0\n").encode(), 3, 1, "strictly increase"),
    ((GOOD_HEADER + "2024-03-01T00:05,60,0\n2024-03-01T00:05,60,0\n").encode(), 3, 1, "strictly increase"),
    ((GOOD_HEADER + "yesterday,60,0\n").encode(), 2, 1, "not ISO 8601"),
    ((GOOD_HEADER + "2024-03-01T00:00:30,60,0\n").encode(), 2, 1, "whole minute"),
    (GOOD_HEADER.encode(), 2, 1, "no data rows"),
    ((GOOD_HEADER + "2024-03-01T00:00,60,0\n2024-03-01T00:01+01:00,60,0\n").encode(), 3, 1, "mixes"),
])
def test_malformed_csv_names_file_line_column(tmp_path, content, line, column, words):
    path = tmp_path / "bad.csv"
    path.write_bytes(content)
    with pytest.raises(TaskError) as err:
        read_series(path)
    message = str(err.value)
    assert message.startswith(f"{path}:{line}:{column}: "), message
    assert words in message and "\n" not in message


def test_channel_count_must_match_config(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text(GOOD_HEADER + "2024-03-01T00:00,60,0\n")
    with pytest.raises(TaskError, match=re.escape(f"{path}:1:1: 2 channel columns but data.channels=8")):
        read_series(path, expected_channels=8)


def test_malformed_captions(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("window_start,caption\n2024-03-01T00:00,ok\nnot-a-time,x\n")
    with pytest.raises(TaskError, match=re.escape(f"{path}:3:1: timestamp 'not-a-time' is not ISO 8601")):
        read_captions(path)
    path.write_text("window_start,caption\n2024-03-01T00:00,\"quoted, with comma\"\n")
    assert read_captions(path)[0][2] == "quoted, with comma"
    path.write_text("start,text\n")
    with pytest.raises(TaskError, match=re.escape(f"{path}:1:1: header must be")):
        read_captions(path)


def test_storage_follows_rows_not_the_time_span(tmp_path):
    """Two short recordings 80 years apart: two windows, arrays sized by the 4 rows (was one row per minute of
    the span: 42 million rows, and 31 GiB for a 9999-12-31 row)."""
    path = tmp_path / "apart.csv"
    path.write_text("timestamp,hr\n1950-01-01T00:00,1\n1950-01-01T00:01,2\n2030-06-01T10:00,3\n2030-06-01T10:01,4\n")
    series = read_series(path)
    assert series.values.shape == (4, 1) and series.minute.tolist()[:2] == [0, 1]
    wins = windows(series, 10)  # 2 of 10 minutes recorded: kept (at least 10 %)
    assert [w.start for w in wins] == [datetime(1950, 1, 1), datetime(2030, 6, 1, 10)]
    assert wins[1].values[:2, 0].tolist() == [3.0, 4.0] and np.isnan(wins[1].values[2:]).all()


def test_a_fifo_or_device_as_data_is_refused_at_once(tmp_path):
    import os

    fifo = tmp_path / "data.csv"
    os.mkfifo(fifo)  # nobody writes to it: reading would block forever
    for path in (fifo, "/dev/zero"):
        with pytest.raises(TaskError, match=r":1:1: not a regular file"):
            read_series(path)
