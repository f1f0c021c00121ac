"""A Lightning script with the cockpit's callback in one real terminal, `attach` in another (tmux).

The user's own `python train.py` trains in the first terminal; `sensorlm-tui attach` (no argument: the
newest live run under ./runs) opens the dashboard in a second one. Space pauses and the step on screen
holds, space resumes, `t` shows why Lightning's settings cannot change, `a` `g` aborts gracefully: the
script saves Lightning's checkpoint and exits 0 in its own terminal, and the viewer closes.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from engine.run.rundir import RunDir
from tests.conftest import ROOT, holds_for, read_events, wait_until
from tests.e2e.tmux import Tmux, needs_tmux, sensorlm

pytestmark = [needs_tmux, pytest.mark.e2e, pytest.mark.slow]

SCRIPT = [sys.executable, str(ROOT / "examples" / "integrations" / "lightning_run.py"), "runs/light",
          "--steps", "100000", "--step-s", "0.02", "--val-every", "25"]


def _shown_step(text: str) -> int:
    found = re.search(r"step (\d+)/100000", text)
    return int(found.group(1)) if found else -1


def test_lightning_script_steered_from_another_terminal(tmp_path: Path, tmux: Tmux) -> None:
    tmux.start("train", SCRIPT)
    run = tmp_path / "runs" / "light"
    wait_until(lambda: RunDir(run).read_status() is not None, 180, "the script's status.json", 0.2)

    tmux.start("attach", sensorlm("attach"))
    text = tmux.wait_for("attach", lambda s: _shown_step(s) >= 5, 90, "attach showing the Lightning run")
    assert "light · lightning/Regressor" in text.splitlines()[0]

    tmux.keys("attach", "Space")
    text = tmux.wait_for("attach", lambda s: "PAUSED" in s.splitlines()[0], 30, "PAUSED in the header")
    held, exact = _shown_step(text), RunDir(run).read_status()["step"]
    holds_for(lambda: _shown_step(tmux.screen("attach")) == held and RunDir(run).read_status()["step"] == exact, 1,
              "the paused run: the step on screen and in status.json", 0.2)
    assert exact >= held
    tmux.keys("attach", "Space")
    tmux.wait_for("attach", lambda s: _shown_step(s) > held + 3, 30, "the run advancing after resume")

    tmux.keys("attach", "t")
    tmux.wait_for("attach", lambda s: "Lightning owns this run" in s, 20, "the tune modal saying why")
    tmux.keys("attach", "Escape")  # alone: an escape with a key right behind it reads as alt+key
    tmux.wait_for("attach", lambda s: "Lightning owns this run" not in s, 20, "the tune modal to close")

    tmux.keys("attach", "a")
    tmux.wait_for("attach", lambda s: "graceful" in s, 20, "the abort modal")
    tmux.keys("attach", "g")
    text = tmux.wait_for("train", lambda s: "EXIT=" in s, 120, "the script to end in its own terminal")
    assert "EXIT=0" in text
    tmux.wait_for("attach", lambda s: "EXIT=" in s, 60, "the viewer to close")
    events = read_events(run)
    final = [e for e in events if e["type"] == "checkpoint" and e["kind"] == "final"]
    assert final and Path(final[0]["path"]).is_file() and events[-1]["status"] == "aborted"
