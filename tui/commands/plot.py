"""`sensorlm-tui plot RUN [RUN…] [--metric NAME] [--width W] [--height H]`: a run's curves on standard output.

For headless logs, CI and a quick look over a slow link: plotext draws a
static chart (axes, ticks, title, legend) as plain text. The live dashboard
draws its own braille (1.3 ms a frame against plotext's 15–21 ms, which
would hold the GIL every refresh); a one-shot chart is plotext's job.

Several runs overlay on one chart, aligned by step, one colour and legend
entry each. ``--metric`` picks any scalar a run logged (tui.model.run_metrics);
the default is the first run's primary metric. A per-step metric is read from
the run's step record as its exact min and max per plot column (the record's
pyramid: a few kilobytes whatever the run's length, so a 100M-step run draws
as fast as a 1k one and every spike stays visible); an old run's log is
converted into its record first, once, with a progress line on stderr.
Validation metrics come from the log's eval events. Colour only on a terminal
without NO_COLOR, so logs stay clean.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import NamedTuple

from engine.core.exit_codes import ExitCode
from engine.core.fmt import printable
from tui.model.format import progress_bar

#: Markers of overlaid runs without colour (with colour every run has its own colour and the first marker).
MARKERS = ("hd", "•", "x", "+", "*", "o")


class PlotError(Exception):
    """Bad input; the message is the one line to print."""


def _resolve(arg: str) -> Path:
    from tui.model.run_index import DEFAULT_ROOT, is_run_dir

    path = Path(arg)
    if is_run_dir(path):
        return path
    if "/" not in arg and is_run_dir(DEFAULT_ROOT / arg):
        return DEFAULT_ROOT / arg
    raise PlotError(f"plot {arg}: no such run (give a run directory, or a name under {DEFAULT_ROOT}/)")


class Chart(NamedTuple):
    """What ``render`` drew: the chart's text, and one line for each run it could not draw (and why)."""

    text: str
    left_out: list[str]


def render(runs: list[Path], metric: str | None = None, width: int = 100, height: int = 25,
           colour: bool = False) -> str:
    """The chart's text (``draw`` without the runs left out)."""
    return draw(runs, metric, width, height, colour).text


def draw(runs: list[Path], metric: str | None = None, width: int = 100, height: int = 25,
         colour: bool = False) -> Chart:
    """The chart of ``metric`` over ``runs``; raises PlotError when none of them logged it.

    A run that lacks the metric is left out of the chart, never silently: ``left_out`` names it with the
    metrics it does have (an LM run beside a toy run: the toy's metrics are not the LM's)."""
    import plotext as plt

    from tui.model.run_metrics import primary

    loaded = [_load(run) for run in runs]
    if metric is None:
        metric = next((primary(h, s) for _, h, s in loaded if s), None)
        if metric is None:
            raise PlotError(f"plot {runs[0]}: the run has logged no metrics yet")
    lacking = [(run, available) for run, _, available in loaded if metric not in available]
    if len(lacking) == len(loaded):
        if len(loaded) == 1:
            raise PlotError(f"plot --metric {metric}: {runs[0]} has no metric {metric!r}; it has: "
                            f"{_names(loaded[0][2])}")
        raise PlotError(f"plot --metric {metric}: none of these runs has a metric {metric!r}; "
                        + "; ".join(f"{run} has: {_names(available)}" for run, available in lacking))
    left_out = [f"{run}: not drawn, it has no metric {metric!r}; it has: {_names(available)}"
                for run, available in lacking]
    plt.clear_figure()
    plt.plot_size(width, height)
    names = [run.name for run in runs]
    unit = ""
    for k, (run, _, available) in enumerate(loaded):
        found = available.get(metric)
        if found is None:
            continue
        x, y = found.points(width)
        label = printable(metric if len(runs) == 1 else run.name if names.count(run.name) == 1 else str(run))
        marker = MARKERS[0] if colour else MARKERS[k % len(MARKERS)]
        draw = plt.scatter if len(x) == 1 or found.kind == "autotune" else plt.plot  # candidates are points
        draw(x.tolist(), y.tolist(), label=label, marker=marker)
        unit = found.kind
    kind = {"val": "validation", "autotune": "each autotune candidate's measured rate"}.get(unit, "training")
    plt.title(f"{printable(metric)} ({kind}) by step")  # names from a log or a directory: never raw on a terminal
    plt.xlabel("step")
    plt.ylabel(printable(metric))
    text = plt.build()
    return Chart(text if colour else plt.uncolorize(text), left_out)


def _load(run: Path):
    """(run, its non-step events, every metric it has by name): per-step ones from its step record (an old run's
    log converted first, a progress line on stderr), validation and autotune ones from its log."""
    from engine.run.history import read_history
    from tui.model.dashboard import SAMPLES_KEPT
    from tui.model.run_metrics import series
    from tui.model.step_open import open_or_convert

    try:
        source = open_or_convert(run, _progress_line(run))
        # A plot draws no sample taken on a clock (memory, system, ranks): a long run's million are never decoded.
        history = read_history(run / "events.jsonl", steps=source is None, newest=dict.fromkeys(SAMPLES_KEPT, 0))
    except OSError as exc:  # a FIFO, a device or an unreadable file where the log should be
        raise PlotError(f"plot {run}: events.jsonl: cannot read ({exc.strerror or exc})") from None
    available = series(history, source)
    return run, history, available


def _progress_line(run: Path):
    """``progress(done, total)`` for a conversion: one updating line on stderr when it is a terminal (nothing into
    a pipe: a script reads the chart, or the one error line)."""

    def progress(done: int, total: int) -> None:
        end = "\n" if done >= total else ""
        if sys.stderr.isatty():
            sys.stderr.write(f"\rsensorlm-tui: plot {run}: converting the old log into a step record "
                             f"{progress_bar(done, total)}{end}")
            sys.stderr.flush()

    return progress


def _names(available: dict) -> str:
    return ", ".join(sorted(available)) if available else "none yet"


def main(args: argparse.Namespace) -> int:
    """Print the chart; exit 2 with one line for a missing run or an unknown metric."""
    try:
        runs = [_resolve(arg) for arg in args.runs]
        size = shutil.get_terminal_size((100, 25))
        width = args.width or min(size.columns, 160)
        height = args.height or max(12, min(size.lines - 2, 30))
        if width < 20 or height < 8:
            raise PlotError(f"plot --width {width} --height {height}: at least 20 × 8 characters")
        colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        chart = draw(runs, args.metric, width, height, colour)
    except PlotError as exc:
        sys.stderr.write(f"sensorlm-tui: error: {printable(str(exc))}\n")
        return ExitCode.BAD_INPUT
    for line in chart.left_out:  # on stderr: the chart on stdout stays a chart, the user still reads why
        sys.stderr.write(f"sensorlm-tui: plot {printable(line)}\n")
    try:
        sys.stdout.write(chart.text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # `plot RUN | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def plot_after_run(run: Path, metric: str | None = None) -> None:
    """`train --headless --plot [METRIC]`: the finished run's chart after its last line (a problem is one line)."""
    size = shutil.get_terminal_size((100, 25))
    try:
        text = render([Path(run)], metric, min(size.columns, 160), 20,
                      sys.stdout.isatty() and "NO_COLOR" not in os.environ)
    except PlotError as exc:
        sys.stderr.write(f"sensorlm-tui: plot: {printable(str(exc))}\n")
        return
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, OSError):
        pass


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `plot` subcommand's flags."""
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run directories or names under ./runs (overlaid)")
    parser.add_argument("--metric", default=None,
                        help="what to plot: loss, lr, grad_norm, a loss component, val_loss, a validation metric, "
                             "autotune_rate (default: the run's primary metric)")
    parser.add_argument("--width", type=int, default=None, help="characters (default: the terminal's, ≤ 160)")
    parser.add_argument("--height", type=int, default=None, help="lines (default: the terminal's, ≤ 30)")
