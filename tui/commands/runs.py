"""`sensorlm-tui runs [DIR] [--json]`: a table of the runs under DIR (default ./runs), newest first.

Columns: name, state (live / finished / aborted / failed / crashed / stale /
unknown; a live run's engine state in brackets when it is not simply
running), step / total, best value of the run's primary metric, a sparkline of the primary metric
(tui/model/trend.py: sampled from the log, constant cost), the last autotune (its gain over the
settings it started from, when it is in the log's tail), last checkpoint (file
and step), age (since the run started). Each run costs one status.json read and a 1 MiB
tail of its event log (tui/model/run_index.py), so a run with a million logged
steps lists as fast as a new one. Torch-free, textual-free.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from engine.core.exit_codes import ExitCode
from tui.model.format import human_duration
from tui.model.run_index import RunSummary, list_runs
from tui.model.trend import trend

_HEADERS = ("NAME", "STATE", "STEP", "BEST", "TREND", "TUNED", "LAST CHECKPOINT", "AGE")


def _state(run: RunSummary) -> str:
    if run.state == "live" and run.run_state not in (None, "running"):
        return f"live ({run.run_state})"
    return run.state


def _step(run: RunSummary) -> str:
    if run.step is None:
        return "–"
    return f"{run.step}/{run.total_steps}" if run.total_steps else str(run.step)


def _checkpoint(run: RunSummary) -> str:
    if not run.last_checkpoint:
        return "–"
    name = Path(run.last_checkpoint).name.removesuffix(".safetensors")
    return f"{name} @ {run.last_checkpoint_step}" if run.last_checkpoint_step is not None else name


def _trend(run: RunSummary) -> str:
    found = trend(Path(run.path))
    return "–" if found is None else f"{found.metric} {found.spark()}"


def _trend_json(run: RunSummary) -> dict | None:
    found = trend(Path(run.path))
    return None if found is None else {"metric": found.metric,
                                       "values": [v if v == v else None for v in found.values]}


def _tuned(run: RunSummary) -> str:
    """The last autotune: its gain over the start ("x2.8 @ 120"), or how it ended ("cancelled @ 120")."""
    tune = run.autotune
    if not tune:
        return "–"
    if tune["status"] == "chosen" and tune.get("rate") and tune.get("start_rate"):
        return f"x{tune['rate'] / tune['start_rate']:.2g} @ {tune['step']}"
    return f"{tune['status']} @ {tune['step']}"


def row(run: RunSummary, now: float) -> tuple[str, ...]:
    """The table cells of one run."""
    best = "–" if run.best is None else f"{run.best:.4g} {run.best_metric or ''}".rstrip()
    return (run.name, _state(run), _step(run), best, _trend(run), _tuned(run), _checkpoint(run),
            human_duration(run.age_s(now)))


def table(runs: list[RunSummary], now: float | None = None) -> str:
    """Fixed-width plain text (no colour, no box drawing: it goes to pipes and greps)."""
    now = time.time() if now is None else now
    rows = [_HEADERS, *(row(r, now) for r in runs)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_HEADERS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    """Print the runs under ``args.dir``; exit 2 with one line when it is not a directory."""
    root = Path(args.dir)
    if not root.is_dir():
        what = "not a directory" if root.exists() else "no such directory"
        sys.stderr.write(f"sensorlm-tui: error: runs {root}: {what}; give the directory that holds your runs "
                         f"(default ./runs)\n")
        return ExitCode.BAD_INPUT
    runs = list_runs(root)
    if args.json:
        print(json.dumps([{**r.to_json(), "trend": _trend_json(r)} for r in runs], indent=1))
        return 0
    if not runs:
        print(f"no runs in {root}/ (start one with `sensorlm-tui train`)")
        return 0
    print(table(runs))
    return 0
