"""`sensorlm-tui runs [DIR] [--json]`: a table of the runs under DIR (default ./runs), newest first.

Columns: name, state (live / finished / aborted / interrupted / failed /
crashed / stale / unknown, in the words the dashboard's exit line used; a live
run's engine state in brackets when it is not simply running), step / total,
best value of the run's primary metric with its unit, a sparkline of the
primary metric (tui/model/trend.py: sampled from the log, constant cost), the
last autotune (its gain over the settings it started from, when it is in the
log's tail), last checkpoint's step (and its name unless it is the rolling
``last``), age (since the run started). Sized for an 80-column terminal: a
timestamp name, a million steps and a best with its unit fit (``--json`` has
every field exact). Each run costs one status.json read and a 1 MiB tail of
its event log (tui/model/run_index.py), so a run with a million logged steps
lists as fast as a new one. Torch-free, textual-free.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from engine.core.exit_codes import ExitCode
from engine.core.invocation import command
from tui.model.format import human_count
from tui.model.run_index import RunSummary, list_runs
from tui.model.trend import spark, trend

_HEADERS = ("NAME", "STATE", "STEP", "BEST", "TREND", "TUNED", "CKPT", "AGE")
#: Sparkline characters in the table (every other sampled point).
TREND_WIDTH = 8


def _state(run: RunSummary) -> str:
    if run.state == "live" and run.run_state not in (None, "running"):
        return f"live ({run.run_state})"
    if run.state == "aborted" and run.finished_as == "interrupted":  # stopped at once: what the dashboard said
        return "interrupted"
    return run.state


def _count(n: int) -> str:
    """Exact up to five digits, then 100k, 1.2M (the exact value is in --json)."""
    return str(n) if n < 100_000 else human_count(n)


def _step(run: RunSummary) -> str:
    if run.step is None:
        return "–"
    return f"{_count(run.step)}/{_count(run.total_steps)}" if run.total_steps else _count(run.step)


def _checkpoint(run: RunSummary) -> str:
    """The newest checkpoint's step ("@20"; "best@20" when it is not the rolling ``last``)."""
    if not run.last_checkpoint:
        return "–"
    name = Path(run.last_checkpoint).name.removesuffix(".safetensors")
    kind = "" if name == "last" else name
    return f"{kind}@{_count(run.last_checkpoint_step)}" if run.last_checkpoint_step is not None else name


def _trend(run: RunSummary) -> str:
    found = trend(Path(run.path))
    if found is None:
        return "–"
    values, n = found.values, len(found.values)
    if n > TREND_WIDTH:  # evenly spaced, the first and the newest kept
        values = tuple(values[round(i * (n - 1) / (TREND_WIDTH - 1))] for i in range(TREND_WIDTH))
    return spark(values) or "–"


def _best(run: RunSummary) -> str:
    """"32.25 dB" (the metric's unit), or "264.9 perplexity" (its name when it has no unit)."""
    if run.best is None:
        return "–"
    metric = run.best_metric or ""
    unit = metric.split(" ", 1)[1] if " " in metric else metric
    return f"{run.best:.4g} {unit}".rstrip()


def _age(seconds: float | None) -> str:
    """"42s", "15m", "3h", "2d": the largest unit only (the exact start is in --json)."""
    if seconds is None:
        return "–"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(max(0, seconds))}s"


def _trend_json(run: RunSummary) -> dict | None:
    found = trend(Path(run.path))
    return None if found is None else {"metric": found.metric,
                                       "values": [v if v == v else None for v in found.values]}


def _tuned(run: RunSummary) -> str:
    """The last autotune: its gain over the start ("x2.8"), or how it ended ("cancelled"); its step in --json."""
    tune = run.autotune
    if not tune:
        return "–"
    if tune["status"] == "chosen" and tune.get("rate") and tune.get("start_rate"):
        return f"x{tune['rate'] / tune['start_rate']:.2g}"
    return str(tune["status"])


def row(run: RunSummary, now: float) -> tuple[str, ...]:
    """The table cells of one run."""
    return (run.name, _state(run), _step(run), _best(run), _trend(run), _tuned(run), _checkpoint(run),
            _age(run.age_s(now)))


def table(runs: list[RunSummary], now: float | None = None) -> str:
    """Fixed-width plain text (no colour, no box drawing: it goes to pipes and greps)."""
    now = time.time() if now is None else now
    rows = [_HEADERS, *(row(r, now) for r in runs)]
    keep = [i for i, name in enumerate(_HEADERS) if name != "TUNED" or any(r.autotune for r in runs)]
    rows = [[r[i] for i in keep] for r in rows]  # no TUNED column when no run was tuned: 80 columns stay enough
    widths = [max(len(r[i]) for r in rows) for i in range(len(keep))]
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
        print(f"no runs in {root}/ (start one with `{command('train')}`)")
        return 0
    print(table(runs))
    return 0
