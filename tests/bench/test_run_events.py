"""bench.run_events reads every step's time from the run's step record, where events.jsonl keeps a line a second."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.run.steps import StepWriter, record_dir


def test_step_times_come_from_the_record_beside_a_log_at_its_cadence(tmp_path):
    from bench.run_events import EventsFile, recorded, steps_per_s

    log = tmp_path / "events.jsonl"
    log.write_text("".join(json.dumps({"type": "step", "step": s, "t": 100.0 + s / 10}) + "\n" for s in (1, 11)))
    events = EventsFile(log)
    events.read()
    assert events.steps == [(1, 100.1), (11, 101.1)]  # no record yet: the log's step lines
    writer = StepWriter(record_dir(tmp_path))
    events.read()  # a record with no series yet: nothing to read there (never a KeyError)
    writer.append_columns(np.arange(1, 16), {"t": 100.0 + np.arange(1, 16) / 10, "loss": np.linspace(2, 1, 15)})
    writer.flush()
    events.read()
    assert [s for s, _ in events.steps] == list(range(1, 16))  # the record: every step, the log's lines aside
    writer.append_columns(np.arange(16, 21), {"t": 100.0 + np.arange(16, 21) / 10, "loss": np.ones(5)})
    writer.close()
    events.read()
    assert events.last_step() == 20 and steps_per_s(events.steps, 3, 13) == pytest.approx(10.0)
    assert recorded(tmp_path, "loss")[20] == 1.0 and recorded(tmp_path / "nowhere") == {}
