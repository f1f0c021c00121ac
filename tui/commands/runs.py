"""`sensorlm-tui runs [DIR] [--json]`: a table of the runs under DIR (default ./runs), newest first.

Columns: name, state (live / stalled / finished / aborted / interrupted /
failed / crashed / stale / unknown, in the words the dashboard's exit line used; a live
run's engine state in brackets when it is not simply running; a stalled one's
silence and process state: "stalled 25s (stopped)"), step / total,
best value of the run's primary metric with its unit, a sparkline of the
primary metric (tui/model/trend.py: sampled from the log, constant cost), the
last autotune (its gain over the settings it started from, when it is in the
log's tail), last checkpoint's step (and its name unless it is the rolling
``last``), age (since the run started). The table fits the terminal (80
columns into a pipe): a cell too wide for its share is shortened in the middle
(``SHRINK``), and ``--json`` has every field exact (never a bare NaN: JSON has
none). Names and states are shown as printable text (engine.core.fmt). Only
the current run's facts are read: a script rerun into the same directory
appends to the old run's log (tui/model/log_tail.py). Each run costs one status.json read and a 1 MiB tail of
its event log (tui/model/run_index.py), so a run with a million logged steps
lists as fast as a new one. Torch-free, textual-free.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from pathlib import Path

from engine.core.exit_codes import ExitCode
from engine.core.fmt import printable
from engine.core.invocation import command
from tui.model.format import human_count
from tui.model.run_index import RunSummary, list_runs
from tui.model.trend import spark, trend

_HEADERS = ("NAME", "STATE", "STEP", "BEST", "TREND", "TUNED", "CKPT", "AGE")
#: Sparkline characters in the table (every other sampled point).
TREND_WIDTH = 8
#: File endings a checkpoint's name is shown without: the engine's, Lightning's, a plain loop's.
CHECKPOINT_SUFFIXES = (".safetensors", ".ckpt", ".pt", ".pth")
#: Width when standard output is not a terminal (a pipe, a file): what a terminal opens with.
PLAIN_WIDTH = 80
#: How a table wider than the terminal gives way, in order: each (column, floor) takes characters from that column
#: down to the floor until the table fits. What identifies and judges a run (its name, state, step, best value)
#: goes last; the checkpoint's name, the trend's oldest points and the best's unit first. A shortened cell loses
#: its middle (…), or the end that matters least (``_shorten``); --json has every value whole.
SHRINK = (("CKPT", 9), ("TREND", 6), ("BEST", 11), ("STATE", 11), ("TUNED", 6), ("CKPT", 6), ("BEST", 9),
          ("TREND", 5), ("NAME", 15), ("STEP", 7), ("NAME", 10), ("STATE", 7), ("TUNED", 5), ("CKPT", 5),
          ("STEP", 5), ("NAME", 8))


def _state(run: RunSummary) -> str:
    if run.state == "stalled" and run.silent_s is not None:  # "stalled 25s (stopped)": how long, and why if known
        return f"stalled {_age(run.silent_s)}" + (f" ({run.process_state})" if run.process_state else "")
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
    """The newest checkpoint's step ("@20"; "best@20", "step@20" when it is not the rolling ``last``)."""
    if not run.last_checkpoint:
        return "–"
    name = Path(run.last_checkpoint).name
    for suffix in CHECKPOINT_SUFFIXES:
        name = name.removesuffix(suffix)
    if run.last_checkpoint_step is not None:  # "step-20@20", a Trainer's "checkpoint-500@500": the step once
        name = name.removesuffix(f"-{run.last_checkpoint_step}")
    kind = "" if name in ("last", "checkpoint") else name  # the rolling one; a Trainer's are all "checkpoint"
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


def table(runs: list[RunSummary], now: float | None = None, width: int = PLAIN_WIDTH) -> str:
    """Fixed-width plain text (no colour, no box drawing: it goes to pipes and greps), at most ``width`` columns
    wide as far as the columns' floors allow; every cell shown as printable text (a run name is the user's, or
    anyone's who could make a directory here: an ESC in it would colour the terminal, a newline break the table)."""
    now = time.time() if now is None else now
    rows = [_HEADERS, *(tuple(printable(cell) for cell in row(r, now)) for r in runs)]
    keep = [i for i, name in enumerate(_HEADERS) if name != "TUNED" or any(r.autotune for r in runs)]
    rows = [[r[i] for i in keep] for r in rows]  # no TUNED column when no run was tuned: 80 columns stay enough
    headers = rows[0]
    widths = _fit(headers, [max(len(r[i]) for r in rows) for i in range(len(keep))], width)
    lines = ["  ".join(_shorten(h, cell, w).ljust(w) for h, cell, w in zip(headers, r, widths)).rstrip()
             for r in rows]
    return "\n".join(lines)


def _fit(headers: list[str], widths: list[int], limit: int) -> list[int]:
    """Column widths whose table (two spaces between columns) fits ``limit``, taken in SHRINK's order."""
    widths = list(widths)
    over = sum(widths) + 2 * (len(widths) - 1) - limit
    for column, floor in SHRINK:
        if over <= 0:
            break
        if column in headers:
            i = headers.index(column)
            take = max(0, min(over, widths[i] - max(floor, len(column))))  # a header stays whole
            widths[i] -= take
            over -= take
    return widths


def _shorten(column: str, cell: str, width: int) -> str:
    """``cell`` in ``width`` characters: the middle gives way (…), except where an end carries the meaning: a
    best keeps its number and the start of its unit, a state and a checkpoint the engine's word and the step
    ("live (check…)", "b…@1.2M"), a step the step before the total, a trend its newest points."""
    if len(cell) <= width:
        return cell
    if column == "BEST" and " " in cell:
        number, unit = cell.split(" ", 1)
        room = width - len(number) - 1
        return f"{number} {_head(unit, room)}" if room >= 1 else _middle(number, width)
    if column == "STATE" and cell.endswith(")") and " (" in cell:
        outer, inner = cell[:-1].split(" (", 1)
        if len(outer) + 4 <= width:
            return f"{outer} ({_head(inner, width - len(outer) - 3)})"
    if column == "CKPT" and "@" in cell:
        kind, at = cell.rsplit("@", 1)
        room = width - len(at) - 1
        if room < 0:
            return _middle(cell, width)
        return f"{_head(kind, room) if room >= 3 else kind[:room]}@{at}"  # "best@…" never reads as "@…" (last)
    if column == "STEP" and "/" in cell:
        return _middle(cell.split("/", 1)[0], width)
    if column == "TREND":
        return cell[-width:]
    if column == "TUNED":
        return _head(cell, width)
    return _middle(cell, width)


def _head(text: str, width: int) -> str:
    """``text``'s start and "…" in ``width`` characters ("…" alone at 1)."""
    return text if len(text) <= width else text[:max(0, width - 1)] + "…"


def _middle(text: str, width: int) -> str:
    """``text`` with its middle replaced by "…" to fit ``width`` (both ends kept)."""
    if len(text) <= width:
        return text
    head = width // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):] if width > 1 else "…"[:width]


def main(args: argparse.Namespace) -> int:
    """Print the runs under ``args.dir``; exit 2 with one line when it is not a directory."""
    root = Path(args.dir)
    if not root.is_dir():
        what = "not a directory" if root.exists() else "no such directory"
        sys.stderr.write(f"sensorlm-tui: error: runs {root}: {what}; give the directory that holds your runs "
                         f"(default ./runs)\n")
        return ExitCode.BAD_INPUT
    runs = list_runs(root)
    if args.json:  # never a bare NaN or Infinity, which are not JSON: a value that is not finite is null
        print(json.dumps(_finite([{**r.to_json(), "trend": _trend_json(r)} for r in runs]), indent=1,
                         allow_nan=False))
        return 0
    if not runs:
        print(f"no runs in {printable(str(root))}/ (start one with `{command('train')}`)")
        return 0
    print(table(runs, width=shutil.get_terminal_size((PLAIN_WIDTH, 24)).columns))
    return 0


def _finite(value):
    """``value`` with every float that is not finite (a NaN best, an infinite loss) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
