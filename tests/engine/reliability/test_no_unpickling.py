"""A checkpoint crafted to run code when unpickled never runs it: resume reads safetensors only, never pickle.

The payload's ``__reduce__`` makes unpickling call ``open(marker, "w")``. It
is planted as last.safetensors (a raw pickle), as last.pt and step-00000009.pt
(torch.save zips, what torch.load would execute), next to the run. The
control proves the payload is live: unpickling it here does create a marker.
"""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli


class _Payload:
    """Unpickling this creates ``marker`` (stands in for arbitrary code)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _plant(checkpoints: Path, marker: Path) -> None:
    import torch

    checkpoints.mkdir(parents=True, exist_ok=True)
    (checkpoints / "last.safetensors").write_bytes(pickle.dumps({"model": _Payload(marker), "step": 9}))
    for name in ("last.pt", "step-00000009.pt"):
        torch.save({"model": _Payload(marker), "step": 9}, checkpoints / name)
    shutil.copy(checkpoints / "last.pt", checkpoints.parent / "model.pt")


def test_the_payload_is_live(tmp_path: Path) -> None:
    pickle.loads(pickle.dumps(_Payload(tmp_path / "control")))
    assert (tmp_path / "control").exists()


@pytest.mark.slow
def test_resume_with_only_malicious_checkpoints_refuses_without_running_them(tmp_path: Path) -> None:
    run, marker = tmp_path / "run", tmp_path / "PWNED"
    run.mkdir()
    shutil.copy(ROOT / "tests" / "hostile" / "checkpoint" / "config.toml", run / "config.toml")
    _plant(run / "checkpoints", marker)
    result = run_cli("train", "--resume", str(run), cwd=tmp_path)  # the real `sensorlm-tui train`
    assert result.returncode == 2, result.stderr
    assert "last.safetensors: not a readable checkpoint" in result.stderr
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
    assert not marker.exists(), "resume executed code from a pickle"


def test_resume_skips_a_malicious_last_and_uses_the_good_previous(engines, tmp_path: Path) -> None:
    run, marker = tmp_path / "run", tmp_path / "PWNED"
    run.mkdir()
    shutil.copy(ROOT / "tests" / "hostile" / "checkpoint" / "config.toml", run / "config.toml")
    _plant(run / "checkpoints", marker)
    shutil.copy(ROOT / "tests" / "hostile" / "checkpoint" / "valid.safetensors",
                run / "checkpoints" / "last.prev.safetensors")
    engine = engines.spawn(["--resume", str(run), "--max-steps", "5"], tmp_path)
    assert engine.wait(60) == 0, engine.stderr()
    out = "\n".join(engine.lines())
    assert "last.prev.safetensors at step 3" in out
    assert "warn  skipped damaged checkpoint:" in out and "last.safetensors: not a readable checkpoint" in out
    assert not marker.exists(), "resume executed code from a pickle"
