"""A run the engine refuses at launch, from the dashboard in a real terminal: the whole refusal is printed.

The memory guard runs in the engine process the dashboard launched, so its
refusal arrives as a LaunchError. The terminal used to get only the last line
of engine.log (one option, no reason); it must show the reason, every option
and where the log is, after the dashboard has given the terminal back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.tmux import Tmux, needs_tmux, sensorlm

pytestmark = [needs_tmux, pytest.mark.e2e, pytest.mark.slow]


def test_a_refused_launch_prints_the_reason_every_option_and_the_log(tmp_path: Path, tmux: Tmux) -> None:
    run = tmp_path / "runs" / "refused"
    tmux.start("refused", sensorlm("train", "--task", "toy", "--threads", "1", "--vram-gb", "0.0001",
                                   "--run-dir", str(run)))
    screen = tmux.wait_for("refused", lambda s: "EXIT=" in s, 90, "the dashboard to exit")
    flat = "".join(screen.split())  # tmux wraps long lines at the pane's width: compare without whitespace
    log = (run / "engine.log").read_text()
    options = [line.strip() for line in log.splitlines() if line.startswith("  - ")]
    assert len(options) >= 2, log
    assert "sensorlm-tui:error:engineexitedwithcode2:predictedpeak" in flat, screen
    assert "doesnotfitthebudget" in flat, screen
    for option in options:
        assert "".join(option.split()) in flat, f"option missing from the terminal: {option}\n{screen}"
    assert "".join(f"engine log: {run / 'engine.log'}".split()) in flat, screen
    assert "EXIT=1" in screen
