"""The gap-filler's dashboard in a real terminal: the PSNR chart with its baselines' guide lines (nearest, linear,
blend, each at the value the evals report), and the metric chooser switching the chart between bands.

A tiny data set and U-Net (the engine tests' own) keep it to seconds. At 120 columns nothing in the chart titles
is cut off (the title takes a second row, each guide line carries its label in the plot), and the chooser's
filter takes what is typed: "psnr 171" finds band 171 (digits pick a chart only while the filter is empty).
The guide lines are generic: the task declares them (``Metric.guides``), the dashboard names no task.
"""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest

from engine.run.rundir import RunDir, pid_alive
from tests.conftest import read_events
from tests.e2e.tmux import Tmux, needs_tmux, paced, sensorlm
from tests.engine.gapfill.gapfill_helpers import TINY, TOML
from tui.model.format import short_float

pytestmark = [needs_tmux, pytest.mark.e2e, pytest.mark.slow]


def _title(text: str) -> str:
    """Chart 1's title (the row under the header, and the next when it wraps), chart 2's cut away."""
    rows = text.splitlines()
    return " ".join(row[:80].strip() for row in rows[1:3])


def test_psnr_chart_has_baseline_guides_and_switches_bands(tmp_path: Path, tmux: Tmux) -> None:
    from engine.tasks.gapfill import synth

    data, config, run = tmp_path / "data", tmp_path / "gapfill.toml", tmp_path / "runs" / "g"
    synth.generate(data, **TINY)
    config.write_text(TOML)
    command = sensorlm("train", "--task", "gapfill", "--config", str(config), "--set", f"data.path={data}",
                       "--threads", "1", "--batch-size", "4", "--eval-every", "2", "--max-steps", "100000",
                       "--run-dir", str(run))
    tmux.start("g", paced(command, seconds=0.02), size=(120, 40))  # evals every 2 steps: a core's worth unpaced
    try:
        _look_at_the_charts(tmux, run)
    finally:  # the engine runs in its own session: a failed check must not leave it training
        pid = (RunDir(run).read_status() or {}).get("pid")
        if pid and pid_alive(pid):
            psutil.Process(pid).kill()


def _choose(tmux: Tmux, *keys: str) -> None:
    """Open the metric chooser, target chart 1, type ``keys`` and apply."""
    tmux.keys("g", "m")
    tmux.wait_for("g", lambda s: "Show in chart" in s, 20, "the metric chooser")
    tmux.keys("g", "1")  # the filter is empty: the digit picks the chart
    tmux.wait_for("g", lambda s: "Show in chart 1 · on screen: [1] 2" in s, 20, "chart 1 targeted")
    for key in (*keys, "Enter"):  # one at a time, as typed
        tmux.keys("g", key)
        time.sleep(0.3)


def _look_at_the_charts(tmux: Tmux, run: Path) -> None:
    def evals(_screen: str) -> int:
        return len([e for e in read_events(run) if e["type"] == "eval"]) if (run / "events.jsonl").exists() else 0

    tmux.wait_for("g", lambda s: evals(s) >= 2 and "RUNNING" in s, 120, "the run training, two evals done")

    _choose(tmux, "d", "i", "s")  # "display PSNR (mean of bands)", the primary metric
    # All three guides: the title takes its second row on the layout pass after the chart switches, so a frame
    # caught in between shows the first guide only.
    text = tmux.wait_for("g", lambda s: all(f"┄ {m}" in _title(s) for m in ("nearest", "linear", "blend")), 30,
                         "the baselines' guide lines on the PSNR chart")
    title = _title(text)
    metrics = [e for e in read_events(run) if e["type"] == "eval"][-1]["metrics"]
    assert title.startswith("display PSNR"), title
    for method in ("nearest", "linear", "blend"):  # the same validation set every eval: the lines do not move
        assert f"{method} {short_float(metrics[f'baseline_{method}_db'])}" in title, title
    rows = text.splitlines()[1:3]
    assert not any(row.rstrip().endswith("…") for row in rows), "no title cut off at 120 columns:\n" + "\n".join(rows)
    plot = "\n".join(row[:80] for row in text.splitlines()[3:])
    assert all(f" {method} " in plot for method in ("nearest", "linear", "blend")), "each guide labelled on its line"

    _choose(tmux, "p", "s", "n", "r", "Space", "0", "9", "4")  # the first band's curve: "PSNR 094 Å"
    tmux.wait_for("g", lambda s: _title(s).startswith("PSNR 094 Å dB"), 30, "band 094 charted")
    _choose(tmux, "p", "s", "n", "r", "Space", "1", "7", "1")  # the issue's own keys: a digit after a word filters
    tmux.wait_for("g", lambda s: _title(s).startswith("PSNR 171 Å dB"), 30, "band 171 charted")

    tmux.keys("g", "a")
    tmux.wait_for("g", lambda s: "graceful" in s, 20, "the abort modal")
    tmux.keys("g", "g")
    assert "EXIT=0" in tmux.wait_for("g", lambda s: "EXIT=" in s, 60, "the app to exit after the abort")
    assert "terminate called" not in (run / "engine.log").read_text()
