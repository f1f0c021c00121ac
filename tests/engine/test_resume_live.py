"""--resume on a run that a live engine still serves is refused in one line, and the run is untouched."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.run.control.launcher import launch
from engine.run.control.requests import abort
from tests.conftest import program, run_forked

pytestmark = pytest.mark.slow


def test_resume_of_a_live_run_is_refused(forks, tmp_path: Path) -> None:
    run = tmp_path / "live"
    engine = launch(["--task", "toy", "--threads", "1", "--max-steps", "100000", "--eval-every", "0"], run)
    try:
        before = (run / "events.jsonl").read_bytes()
        result = run_forked(forks, "train", "--resume", str(run), "--headless")
        assert result.returncode == 2
        assert result.stderr.strip() == (f"sensorlm-tui: error: --resume {run}: an engine is still running this run; "
                                         f"watch it with `{program()} attach {run}`")
        after = (run / "events.jsonl").read_bytes()
        assert after.startswith(before) and after.count(b'"type":"schema"') == 1
    finally:
        engine.client().send(abort("now"))
        engine.wait(30)
