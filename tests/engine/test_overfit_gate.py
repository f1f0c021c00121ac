"""The overfit gate preflight (engine.training.overfit_gate) leaves the run it guards exactly as it would be
without it."""

from __future__ import annotations

import pytest

from tests.conftest import read_events, run_forked

pytestmark = pytest.mark.slow

TOY = ["train", "--headless", "--task", "toy", "--threads", "1", "--set", "toy.dim=32", "--set", "toy.val_samples=8",
       "--max-steps", "6", "--eval-every", "3"]


def test_a_passed_gate_leaves_the_run_bit_identical(forks, tmp_path):
    gated = run_forked(forks, *TOY, "--set", "evaluation.overfit_gate=8", "--set", "evaluation.overfit_gate_steps=50",
                       "--run-dir", str(tmp_path / "gated"))
    assert gated.returncode == 0, gated.stdout + gated.stderr
    assert "overfit gate passed" in gated.stdout
    plain = run_forked(forks, *TOY, "--run-dir", str(tmp_path / "plain"))
    assert plain.returncode == 0, plain.stderr

    def numbers(run: str) -> list:
        return [(e["type"], e["step"], e.get("loss", e.get("val_loss"))) for e in read_events(tmp_path / run)
                if e["type"] in ("step", "eval")]

    assert numbers("gated") == numbers("plain") and len(numbers("plain")) == 6 + 3
    phases = [e["phase"] for e in read_events(tmp_path / "gated") if e["type"] == "phase"]
    assert "overfit gate" in phases
