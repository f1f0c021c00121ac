"""The overfit gate, run by the engine (``evaluation.overfit_gate``): 8 frozen samples are learned and the run goes on;
with the model's conditioning cut they are not, and the run stops before its first step: one line, exit 1.

The pass threshold is the task's: the gap-filler's presets set ``evaluation.overfit_target`` (its untrained model is
already the blend, so the gate asks for a relative cut, not a loss near 0).
"""

from __future__ import annotations

import pytest
from gapfill_helpers import cli_flags  # pytest puts this test directory on sys.path

from engine.tasks.gapfill.spec import PRESETS
from tests.conftest import read_events, run_forked

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("conditioned", [True, False], ids=["conditioned", "conditioning-cut"])
def test_overfit_gate_passes_on_8_frozen_samples_and_fails_with_conditioning_cut(forks, tmp_path, tiny_data,
                                                                                 conditioned):
    run = tmp_path / "r"
    result = run_forked(forks, *cli_flags(tmp_path, tiny_data, "--max-steps", "2", "--eval-every", "0",
                                          "--run-dir", str(run), "--set", "evaluation.overfit_gate=8",
                                          "--set", f"gapfill.model.conditioned={str(conditioned).lower()}"),
                        timeout=300)
    target = PRESETS["demo"]["evaluation"]["overfit_target"]
    events = read_events(run)
    steps = [e for e in events if e["type"] == "step"]
    finished = events[-1]
    assert finished["type"] == "run_finished"
    if conditioned:
        assert result.returncode == 0, result.stdout + result.stderr
        assert "overfit gate passed" in result.stdout and f"(must be <= {target})" in result.stdout
        assert len(steps) == 2 and finished["status"] == "finished"
    else:
        assert result.returncode == 1, result.stdout + result.stderr
        reason = finished["reason"]  # one line: the verdict, also the console's `done` line
        assert reason.startswith("overfit gate FAILED") and f"(must be <= {target})" in reason and "\n" not in reason
        assert f"done  failed at step 0 {reason}" in result.stdout, result.stdout
        assert finished["status"] == "failed" and finished["steps"] == 0 and not steps
        assert "Traceback" not in result.stderr
