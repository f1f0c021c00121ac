"""A hung rank under torchrun (2 CPU processes, gloo): the job stops after the collective timeout and says so.

Rank 1 is SIGSTOP'd mid-run (alive, holding its sockets, answering nothing): rank 0's next collective
fails after ``runtime.collective_timeout_s`` (5 s here), rank 0 records which collective hung after which
step and that rank 1 did not arrive, and the supervisor kills the stopped rank instead of waiting the
agent's 30 s for a SIGTERM a stopped process cannot act on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from engine.app.supervisor import Reaper
from tests.conftest import read_events, wait_until
from tests.engine.distributed.test_ddp import start_two_ranks_until_a_step


@pytest.mark.slow
def test_a_stopped_rank_is_reported_as_a_hang_within_the_timeout(tmp_path):
    run = tmp_path / "run"
    job, pid = start_two_ranks_until_a_step(run, "--set", "runtime.collective_timeout_s=5")
    try:
        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        out, err = job.communicate(timeout=60)
        assert time.monotonic() - stopped < 5 + 20, err[-2000:]
    finally:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert job.returncode == 3, (out[-2000:], err[-2000:])
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "failed" and status["exit_code"] == 3
    assert (status["resume_command"].endswith(f"--resume {run} --nproc-per-node 2")
            and "did not arrive" in status["reason"])
    hung = status["hung"]
    assert hung["missing"] == [1] and hung["timeout_s"] == 5 and hung["step"] >= 1 and hung["collective"]
    finished = [e for e in read_events(run) if e.get("type") == "run_finished"][-1]
    assert finished["exit_code"] == 3 and f"collective '{hung['collective']}' timed out" in finished["reason"]
    assert "rank 1 did not arrive" in finished["reason"]
    assert finished["resume_command"].endswith(f"--resume {run} --nproc-per-node 2")


def test_collective_timeout_is_validated(tmp_path):
    from tests.conftest import run_cli

    bad = run_cli("--task", "toy", "--max-steps", "1", "--run-dir", str(tmp_path / "r"),
                  "--set", "runtime.collective_timeout_s=0", module="engine")
    assert bad.returncode == 2 and "collective_timeout_s" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "r").exists()


def test_a_recorded_hang_kills_this_nodes_workers_other_than_rank_0(tmp_path):
    """The supervisor's reaper, on three children of this process: rank 1 (SIGSTOP'd, as a hung rank is) is
    killed once status.json records the hang; rank 0 and a child that is no torchrun worker are left alone."""
    (tmp_path / "status.json").write_text('{"state": "running"}')
    env = {k: v for k, v in os.environ.items() if k != "RANK"}
    children = {name: subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                                       env={**env, **extra}, stdin=subprocess.DEVNULL)
                for name, extra in (("rank 1", {"RANK": "1"}), ("rank 0", {"RANK": "0"}), ("other", {}))}
    reaper = Reaper(tmp_path, every_s=0.05).start()
    try:
        os.kill(children["rank 1"].pid, signal.SIGSTOP)
        (tmp_path / "status.json").write_text('{"state": "running", "hung": {"missing": [1]}}')
        wait_until(lambda: children["rank 1"].poll() is not None, 30, "the reaper to kill rank 1")
        assert children["rank 1"].returncode == -signal.SIGKILL
        assert children["rank 0"].poll() is None and children["other"].poll() is None
    finally:
        reaper.stop()
        for child in children.values():
            child.kill()
            child.wait()
