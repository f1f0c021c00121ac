"""In a real terminal: train, abort gracefully, resume, attach → the viewer steers the new generation.

Before the fix the attached viewer folded the first generation's RunFinished into the second: the
status stayed "aborted", every key answered "the run has ended — nothing to control", and steps/s
mixed the downtime in. Here the header says "resumed from step N", pause and resume work, and the
shown steps/s matches the engine's own pace within 10 s of resuming from the pause.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from engine.run.control import requests as control
from engine.run.control.client import RunClient
from engine.run.rundir import RunDir, pid_alive
from tests.conftest import read_events, wait_until
from tests.e2e.tmux import Tmux, needs_tmux, sensorlm
from tests.tui.attach.conftest import status_step

pytestmark = [needs_tmux, pytest.mark.e2e, pytest.mark.slow]


def _true_rate(run: Path, seconds: float = 4.0) -> float | None:
    """Steps/s over the last ``seconds`` of step events (the engine's real pace)."""
    steps = [(e["t"], e["step"]) for e in read_events(run) if e["type"] == "step"]
    recent = [(t, s) for t, s in steps if t >= steps[-1][0] - seconds] if steps else []
    if len(recent) < 2 or recent[-1][0] <= recent[0][0]:
        return None
    return (recent[-1][1] - recent[0][1]) / (recent[-1][0] - recent[0][0])


def _shown_rate(screen: str) -> float | None:
    found = re.search(r"([\d.,]+)\s*steps/s", screen)  # 1,020 steps/s: thousands separated, never an exponent
    return float(found.group(1).replace(",", "")) if found else None


def _eta_rate(screen: str) -> float | None:
    """The rate the ETA implies: steps left / seconds left."""
    step = re.search(r"step (\d+)/100000", screen)
    eta = re.search(r"ETA ((?:\d+[dhms])+)", screen)
    if not step or not eta:
        return None
    unit = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    seconds = sum(int(n) * unit[u] for n, u in re.findall(r"(\d+)([dhms])", eta.group(1)))
    return (100000 - int(step.group(1))) / seconds if seconds else None


def _stop(run: Path) -> None:
    pid = (RunDir(run).read_status() or {}).get("pid")
    if pid and pid_alive(pid):
        import psutil

        psutil.Process(pid).terminate()
        wait_until(lambda: not pid_alive(pid), 30, "the engine to stop")


def test_train_abort_resume_attach_pause_rates_and_header(tmp_path: Path, tmux: Tmux) -> None:
    run = tmp_path / "runs" / "r"
    tmux.start("train", sensorlm("train", "--headless", "--task", "toy", "--threads", "1", "--max-steps", "100000",
                                 "--eval-every", "0", "--run-dir", str(run)))
    try:
        wait_until(lambda: status_step(run) >= 30, 90, "the first engine at step 30")
        RunClient(run).send(control.abort("graceful"), timeout=30)
        tmux.wait_for("train", lambda s: "EXIT=" in s, 60, "the first engine to exit after the abort")
        aborted_at = [e for e in read_events(run) if e["type"] == "run_finished"][-1]["steps"]

        tmux.start("resume", sensorlm("train", "--headless", "--resume", str(run)))
        wait_until(lambda: status_step(run) >= aborted_at + 5, 90, "the resumed engine training")
        tmux.start("attach", sensorlm("attach", str(run)))
        header = f"resumed from step {aborted_at}"
        text = tmux.wait_for("attach", lambda s: header in s, 60, "the header saying " + header)
        assert "nothing to control" not in text and "ABORTED" not in text

        tmux.keys("attach", "space")
        tmux.wait_for("attach", lambda s: "PAUSED" in s, 30, "the pause to take effect")
        assert RunDir(run).read_status()["state"] == "paused"
        time.sleep(2)  # a pause the rate must not count
        tmux.keys("attach", "space")
        tmux.wait_for("attach", lambda s: "RUNNING" in s, 30, "the run to go on")
        resumed = time.monotonic()

        seen: list = []

        def rate_matches() -> bool:
            screen = tmux.screen("attach")
            shown, truth, by_eta = _shown_rate(screen), _true_rate(run), _eta_rate(screen)
            seen[:] = [(shown, by_eta), truth, screen]
            # The ETA is (steps left) / the model's steps/s, so it checks the rate even where the layout has no
            # room for the steps/s line; when that line shows, it must agree too.
            good_eta = bool(truth and by_eta and 0.5 <= by_eta / truth <= 2.0)
            return good_eta and (shown is None or 0.5 <= shown / truth <= 2.0)

        try:
            wait_until(rate_matches, 10, "the ETA's rate (and steps/s, if shown) within 2x of the engine's pace")
        except BaseException:
            print(f"shown {seen[0]} truth {seen[1]}\n{seen[2]}")
            raise
        assert time.monotonic() - resumed <= 10.5
    finally:
        _stop(run)
