"""`train --nproc-per-node 2` refuses a job predicted not to fit a rank: exit 2, one line naming ranks, bytes,
budget."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow


def test_a_job_that_fits_no_rank_is_refused_before_a_step(tmp_path):
    result = run_cli("train", "--task", "toy", "--nproc-per-node", "2", "--device", "cpu", "--vram-gb", "0.0001",
                     "--run-dir", str(tmp_path / "run"), cwd=tmp_path, timeout=180)
    assert result.returncode == 2, result.stderr[-2000:]
    error = next(line for line in result.stderr.splitlines() if "sensorlm-tui: error:" in line)
    assert "predicted peak on each of ranks 0-1 (2 ranks, ddp)" in error and "MiB" in error
    assert "does not fit the budget 94.4 KiB" in error and "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "events.jsonl").exists()  # no rank trained, nothing but torchrun's logs
