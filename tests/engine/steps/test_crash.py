"""A writer SIGKILLed at random points, then resumed from a checkpoint at or before its last row: in the end every
step is in the record exactly once with the value of its last attempt, and a reader opening the record right
after each kill sees only whole rows."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from engine.run.steps import StepWriter, open_record
from tests.conftest import cli_env

pytestmark = pytest.mark.slow

LAST = 30_000
NAMES = 24  # a batch touches this many series: a kill often lands inside one

CHILD = """
import sys
from engine.run.steps import StepWriter
directory, resume, attempt, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
writer = StepWriter(directory)
writer.truncate_after(resume)
print("open", flush=True)
for step in range(resume + 1, {last} + 1):
    row = {{"loss": step + attempt / 16, **{{f"c{{i}}": step * 10.0 + i for i in range({names})}}}}
    if step % 3 == 0:
        row["every3"] = -float(step)
    writer.append(step, row)
    if step % batch == 0:
        writer.flush()
writer.close()
print("done", flush=True)
""".format(last=LAST, names=NAMES)


def _check(directory) -> int:
    """Whole rows only: consecutive steps from 1, each value that of the step; returns the last step."""
    record = open_record(directory)
    steps, loss = record.window("loss", 0, LAST)
    assert steps.tolist() == list(range(1, len(steps) + 1))
    assert (np.floor(loss) == steps).all()  # (the fraction says which attempt wrote it)
    for name in ("c0", f"c{NAMES - 1}", "every3"):
        if name in record.names():
            at, values = record.window(name, 0, LAST)
            assert (at <= record.last_step).all() and len(set(at.tolist())) == len(at)
            want = -at.astype(float) if name == "every3" else at * 10.0 + int(name[1:])
            np.testing.assert_array_equal(values, want)
    return record.last_step or 0


def test_a_writer_killed_at_random_points_resumes_with_no_lost_and_no_duplicated_step(tmp_path):
    rng = np.random.default_rng(38)
    last = 0
    for attempt in range(1, 9):
        resume = int(rng.integers(max(0, last - 2000), last + 1))  # the checkpoint: at or before the last row
        batch = int(rng.choice([1, 7, 200, 1000]))
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), str(resume), str(attempt), str(batch)],
                                 env=cli_env(), stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "open"
        time.sleep(float(rng.uniform(0.0, 0.4)))
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        last = _check(tmp_path)
        assert last >= resume
    writer = StepWriter(tmp_path)  # the last attempt runs to the end
    writer.truncate_after(last - 5)
    for step in range(last - 4, LAST + 1):
        writer.append(step, {"loss": step + 0.0, **{f"c{i}": step * 10.0 + i for i in range(NAMES)},
                             **({"every3": -float(step)} if step % 3 == 0 else {})})
    writer.close()
    assert _check(tmp_path) == LAST
    assert open_record(tmp_path).window("every3", 0, LAST)[0].tolist() == list(range(3, LAST + 1, 3))
