"""The optimizer-state sha256 written with every checkpoint is verified by the engine on resume.

The digest is recomputed from the optimizer as loaded. A checkpoint whose
optimizer state was edited with every checksum recomputed (the manifest, the
metadata's sha256) passes the file checks; only the digest tells it is not
the state that was saved, and the resume is refused: one line, exit 2,
nothing on disk changed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import read_events, run_forked

pytestmark = pytest.mark.slow

TOY = ["train", "--task", "toy", "--threads", "1", "--headless", "--eval-every", "2", "--checkpoint-every", "2"]


def _snapshot(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def test_resume_logs_the_match_and_refuses_a_consistently_edited_optimizer_state(forks, tmp_path: Path) -> None:
    from engine.checkpoint import format as ckpt

    run = tmp_path / "r"
    first = run_forked(forks, *TOY, "--max-steps", "4", "--run-dir", str(run))
    assert first.returncode == 0, first.stderr
    saved = [e for e in read_events(run) if e["type"] == "checkpoint"][-1]
    last = ckpt.read(run / "checkpoints" / "last.safetensors")
    assert last.meta["optimizer_digest"] == saved["digest"] == ckpt.optimizer_digest(last.tensors)

    resumed = run_forked(forks, "train", "--resume", str(run), "--headless", "--max-steps", "6")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resume: optimizer state sha256 {saved['digest'][:16]}… matches {last.path}" in resumed.stdout

    # Edit one moment of the newest checkpoint and rewrite it with fresh checksums: a valid file whose
    # optimizer state is not what was saved (nor what its digest says).
    edited = ckpt.read(run / "checkpoints" / "last.safetensors")
    name = sorted(k for k in edited.tensors if k.startswith("optim.") and k.endswith(".exp_avg"))[0]
    edited.tensors[name] = edited.tensors[name] + 1e-3
    ckpt.write(edited.path, edited.tensors, edited.meta)
    ckpt.read(edited.path)  # still passes every file check
    before = _snapshot(run)
    refused = run_forked(forks, "train", "--resume", str(run), "--headless", "--max-steps", "8")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert "optimizer state as loaded has sha256" in refused.stderr and str(edited.path) in refused.stderr
    assert _snapshot(run) == before
