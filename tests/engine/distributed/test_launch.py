"""Bad distributed flags are one line and exit 2, before anything starts (torch-free, fast)."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli


@pytest.mark.parametrize("flags, says", [
    (["--nproc-per-node", "0"], "--nproc-per-node=0: must be >= 1"),
    (["--nproc-per-node", "2", "--nnodes", "2"], "--nnodes=2: needs --rdzv-endpoint"),
    (["--nproc-per-node", "1", "--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:1"],
     "--node-rank=2: must be < --nnodes (2)"),
    (["--nproc-per-node", "2", "--rdzv-endpoint", "nohostport"], "expected HOST:PORT"),
    (["--nproc-per-node", "2", "--strategy", "zero3"], "--strategy: invalid choice: 'zero3'"),
])
def test_bad_distributed_flags_are_one_line_and_exit_2(tmp_path, flags, says):
    result = run_cli("train", "--task", "toy", "--run-dir", str(tmp_path / "run"), *flags, cwd=tmp_path)
    assert result.returncode == 2 and says in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists() and not (tmp_path / "runs").exists()  # nothing trained, nothing written
