"""`runs` sparklines: the primary metric sampled from the log, with the fallbacks of runs without capabilities."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from engine.run import events as ev
from tests.conftest import run_cli
from tui.model.trend import POINTS, Trend, spark, trend

CAPS = {"primary": {"name": "psnr_db", "kind": "val", "higher_is_better": True}}


def _run(root: Path, name: str, steps: int, caps: dict | None = None, eval_every: int = 0) -> Path:
    run = root / name
    run.mkdir(parents=True)
    lines = [ev.Schema(t=1.0), ev.RunStarted(t=1.0, name=name, total_steps=steps, capabilities=caps or {})]
    for i in range(1, steps + 1):
        lines.append(ev.StepLogged(t=1.0 + i, step=i, loss=1.0 / i))
        if eval_every and i % eval_every == 0:
            lines.append(ev.EvalDone(t=1.0 + i, step=i, val_loss=2.0 / i, metrics={"val_loss": 2.0 / i, "psnr_db": i}))
    (run / "events.jsonl").write_text("".join(ev.to_json(e) + "\n" for e in lines))
    return run


def test_primary_metric_rises_across_the_run(tmp_path: Path) -> None:
    found = trend(_run(tmp_path, "a", 2000, CAPS, eval_every=50))
    assert found is not None and found.metric == "psnr_db"
    assert POINTS <= len(found.values) <= POINTS + 1
    assert list(found.values) == sorted(found.values) and found.values[-1] == 2000  # the newest eval ends it
    assert found.spark()[0] == "▁" and found.spark()[-1] == "█"


@pytest.mark.parametrize("eval_every,metric", [(100, "val_loss"), (0, "loss")])
def test_without_capabilities_val_loss_then_loss(tmp_path: Path, eval_every: int, metric: str) -> None:
    found = trend(_run(tmp_path, "old", 3000, eval_every=eval_every))
    assert found is not None and found.metric == metric
    assert list(found.values) == sorted(found.values, reverse=True)  # losses fall
    assert found.values[-1] == pytest.approx((2.0 if eval_every else 1.0) / 3000)


def test_no_log_or_empty_log_has_no_trend(tmp_path: Path) -> None:
    assert trend(tmp_path) is None
    (tmp_path / "events.jsonl").write_text("")
    assert trend(tmp_path) is None


def test_spark_scales_and_blanks_non_finite() -> None:
    assert spark([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█"
    assert spark([1.0, math.nan, 1.0]) == "▄ ▄"
    assert spark([]) == ""


def test_runs_shows_the_sparkline_column(tmp_path: Path) -> None:
    _run(tmp_path, "a", 500, CAPS, eval_every=25)
    table = run_cli("runs", str(tmp_path)).stdout.splitlines()
    assert "TREND" in table[0].split()
    assert " ▁" in table[1] and "█" in table[1]  # the trend column: bars of the primary (named in BEST)
    record = json.loads(run_cli("runs", str(tmp_path), "--json").stdout)[0]
    assert record["trend"]["metric"] == "psnr_db" and record["trend"]["values"][-1] == 500


def test_a_lone_eval_line_across_a_segment_boundary_is_found(tmp_path: Path) -> None:
    """Seen in CI (`runs --json` on a run with one eval): each segment's search stops at its end, so an eval line
    whose start straddles a boundary is missed by all of them, and the newest-eval step then read ``starts[-1]``
    of an empty list (IndexError)."""
    line = b"\n" + ev.to_json(ev.EvalDone(step=1, val_loss=0.5)).encode() + b"\n"
    log = tmp_path / "events.jsonl"
    for pad in range(1, len(line) + 20):  # the eval line's start moves across the middle boundary of 2 segments
        log.write_bytes(b"x" * pad + line + b"y" * 20)
        assert trend(tmp_path, points=2) == Trend("val_loss", (0.5,)), pad
