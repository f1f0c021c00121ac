"""Autotune end to end in a real terminal: the key, the table, the choice applied and the rate rising; cancel.

The toy task from a deliberately poor micro-batching (batch 16 in 16 micro-batches of one sample), each micro-batch
given a fixed cost the box's load cannot blur: a sleep of ``MICRO_BATCH_S`` (engine.training.faults' ``slow``),
which also leaves the cores to the rest of the suite. With the toy's own cost alone (~1 ms a micro-batch) a loaded
CI box once measured no candidate beyond the noise and kept the start. f starts the search and opens its table, the
engine measures the candidates on its own steps and applies the fastest, and the steps/s the progress panel shows
rises. Then f again starts another search from there and x cancels it while it runs: the micro-batching is what it
was before that search (tests/engine/test_autotune.py cancels one that has moved it, through the same request).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.conftest import read_events
from tests.e2e.tmux import Tmux, needs_tmux, paced, sensorlm

pytestmark = [needs_tmux, pytest.mark.e2e, pytest.mark.slow]


def _rate(text: str) -> float:
    """The steps/s the progress panel shows (-1 when not on screen)."""
    found = re.search(r"([\d.,]+) steps/s", text)  # 1,020 steps/s: thousands separated (engine.core.fmt.number)
    return float(found.group(1).replace(",", "")) if found else -1.0


#: The autotune table's title: on screen while the table is open.
TABLE = "autotune: the fastest settings that fit"


def _step(text: str) -> int:
    found = re.search(r"step (\d+)/", text)
    return int(found.group(1)) if found else -1


def _last_choice(run: Path, wanted) -> dict:
    """The newest AutotuneChose in the run's log once ``wanted(it)`` holds (the log is flushed every second, so
    the screen may show an event before the file has it)."""
    deadline = time.monotonic() + 10
    while True:
        found = [e for e in read_events(run) if e["type"] == "autotune_chose"]
        if found and wanted(found[-1]):
            return found[-1]
        assert time.monotonic() < deadline, found[-1:] or "no autotune_chose in the log"
        time.sleep(0.2)


def _table(chose: dict) -> str:
    """A search's result and each candidate's measurement, one line each: what a failure has to show."""
    rows = [f"{r['settings']} rate {r['rate']:.0f} ±{r['noise']:.0%} over {r['steps']} steps (warm-up {r['warmup']},"
            f" ended {r['ended'] or 'at the end'}) {r['why']}" for r in chose["table"]]
    return "\n".join([f"{chose['status']} {chose['settings']} {chose['reason']}", *rows])


#: The sleep each micro-batch of the first steps takes (tests.conftest.pacing): 48 ms a step at 16 micro-batches,
#: 3 at 1.
MICRO_BATCH_S = 0.003


def test_autotune_key_chooses_applies_and_cancel_restores(tmp_path: Path, tmux: Tmux) -> None:
    run = tmp_path / "r"
    tmux.start("tune", paced(sensorlm(
        "train", "--task", "toy", "--threads", "1", "--batch-size", "16", "--grad-accum", "16", "--max-steps",
        "1000000", "--eval-every", "0", "--checkpoint-every", "0", "--set", "autotune.settings=['grad_accum']",
        "--set", "autotune.warmup_steps=2", "--set", "autotune.window_steps=30", "--run-dir", str(run)),
        seconds=MICRO_BATCH_S))
    text = tmux.wait_for("tune", lambda s: _step(s) >= 40 and _rate(s) > 0, 120, "the toy training at its start")
    before = _rate(text)

    tmux.keys("tune", "f")
    table = tmux.wait_for("tune", lambda s: "candidate" in s and "predicted" in s and "grad_accum 16" in s, 60,
                          "the autotune table")
    assert "searching from step" in table
    chosen = tmux.wait_for("tune", lambda s: "chosen:" in s or "kept the start" in s, 120, "the search to end")
    chose = _last_choice(run, lambda c: True)
    assert chose["status"] == "chosen" and chose["settings"]["grad_accum"] < 16, _table(chose)
    assert f"grad_accum {chose['settings']['grad_accum']}" in chosen and "chosen" in chosen
    tmux.keys("tune", "Escape")
    tmux.wait_for("tune", lambda s: TABLE not in s, 20, "the autotune table to close")
    tmux.wait_for("tune", lambda s: _rate(s) > 1.3 * before, 60, f"steps/s rising above {before}")

    # A second search, from the tuned setting, cancelled while it runs. At the tuned rate a search of three
    # candidates is over in a fifth of a second, before any key could follow it, so the run is paused first:
    # the engine answers requests while paused, and the search waits on steps that do not come.
    tmux.keys("tune", "Space")
    tmux.wait_for("tune", lambda s: "PAUSED" in s, 30, "the run paused")
    tmux.keys("tune", "f")
    tmux.wait_for("tune", lambda s: "searching from step" in s and "x cancel" in s, 60, "the second search")
    tmux.keys("tune", "x")
    tmux.wait_for("tune", lambda s: "cancelled: the settings before it restored" in s and "x cancel" not in s, 30,
                  "the cancel in the table, no cancel key left")
    tmux.keys("tune", "Escape")  # alone: an escape with a key right behind it reads as alt+key
    tmux.wait_for("tune", lambda s: TABLE not in s, 20, "the autotune table to close")
    tmux.keys("tune", "Space")
    tmux.wait_for("tune", lambda s: "RUNNING" in s, 30, "the run resumed")
    last = _last_choice(run, lambda c: c["status"] == "cancelled")
    assert last["settings"] == chose["settings"]
    # whatever the search had tried by then (the engine-side test moves it first), the setting is back
    in_force = [e for e in read_events(run) if e["type"] == "setting" and e["name"] == "grad_accum"][-1]
    assert in_force["new"] == chose["settings"]["grad_accum"]
    assert in_force["step"] <= last["step"] and "autotune" in in_force["reason"]
    tmux.keys("tune", "Escape")
    # An Escape followed at once by a key reads as Alt+key, and this one changes nothing on screen to wait for:
    # the pause is the terminal's escape timeout, not a wait on the app.
    time.sleep(0.5)
    tmux.keys("tune", "a")
    tmux.wait_for("tune", lambda s: "graceful" in s, 20, "the abort modal")
    tmux.keys("tune", "g")
    assert "EXIT=0" in tmux.wait_for("tune", lambda s: "EXIT=" in s, 60, "the app to exit")
