"""Loss-plot frame time against history length: `python -m bench.plot_render [--quick]`.

One frame = what the dashboard does per plot redraw on the full-history view:
the exact envelope of every dot column read from the run's step record (its
min/max pyramid, engine.run.steps) and the smoothed line, then the braille canvas
(tui.widgets.braille) straight into Rich Text. Measured at 1k / 10k / 100k / 1M logged steps at the 120×40 layout's
loss-plot size (78×16 cells inside its border), interleaved across sizes.
For contrast, the same frame with the raw points handed to plotext (what a
naive plot does) at the sizes where that finishes in reasonable time.
Goals: flat in the number of points, < 20 ms a frame (dashboard issue; < 50 ms in the benchmarks issue).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import Section, fmt_stats, interleave, smoke, stats, verdict
from engine.run.steps import StepWriter, open_record
from tui.model.dashboard import RunModel
from tui.model.ema import LEVELS, EmaState, ema_extend
from tui.model.step_source import RecordSteps
from tui.widgets.metric_chart import MetricChart

#: Content size of the loss plot at 120×40 (inside its border).
WIDTH, HEIGHT = 78, 16
SIZES = (1_000, 10_000, 100_000, 1_000_000)
#: Raw plotext costs ~10-40 µs a point: only these sizes are timed raw.
RAW_SIZES = (1_000, 10_000)
GOAL_MS = 20.0


def model_with(points: int, directory: Path) -> RunModel:
    """A model on a step record of ``points`` steps (written in bulk, as a converted run's), as attach opens it."""
    rng = np.random.default_rng(0)
    steps = np.arange(1, points + 1)
    loss = 2.0 * np.exp(-steps / (points / 5)) + 0.1 + 0.05 * rng.standard_normal(points)
    writer = StepWriter(directory / f"run-{points}" / "steps")
    writer.append_columns(steps, {"loss": loss, "t": 1.7e9 + steps * 0.01})
    writer.close()
    model = RunModel()
    model.open_steps(RecordSteps(open_record(directory / f"run-{points}")))
    return model


def plot_for(model: RunModel) -> MetricChart:
    """A MetricChart of the loss on ``model`` with fixed colours (no running app needed), full-history view."""
    plot = MetricChart("loss")
    plot._model = model
    plot.window = "full"
    plot.color = lambda role: {"raw": (156, 140, 242), "ema": (78, 161, 255)}.get(role, (245, 166, 35))
    return plot


def frame_ms(plot: MetricChart) -> float:
    """One dashboard frame, milliseconds."""
    start = time.perf_counter()
    plot.build(WIDTH, HEIGHT)
    return (time.perf_counter() - start) * 1000


def raw_frame_ms(model: RunModel) -> float:
    """The same picture with every point given to plotext (no min/max reduction), milliseconds."""
    from rich.text import Text
    from textual_plotext.plot import Plot

    steps, loss = model.series.window("loss", 0, 10**12)
    ema = ema_extend(loss, LEVELS[-1], EmaState())
    start = time.perf_counter()
    p = Plot()
    p.theme("clear")
    p.plotsize(WIDTH, HEIGHT)
    p._set_size(WIDTH, HEIGHT)
    p.plot(steps.tolist(), loss.tolist(), marker="braille", color=(156, 140, 242))
    p.plot(steps.tolist(), ema.tolist(), marker="braille", color=(78, 161, 255))
    Text.from_ansi(p.build())
    return (time.perf_counter() - start) * 1000


def run(quick: bool = False) -> Section:
    """Measure and return the results section for docs/BENCHMARKS.md."""
    repeats = 1 if smoke() else 5 if quick else 15
    sizes, raw_sizes = ((1_000, 10_000), (1_000,)) if smoke() else (SIZES, RAW_SIZES)
    scratch = tempfile.TemporaryDirectory()
    models = {n: model_with(n, Path(scratch.name)) for n in sizes}
    plots = {n: plot_for(m) for n, m in models.items()}
    for plot in plots.values():  # warm-up: first-call costs (imports, numpy dispatch) stay out of the timings
        frame_ms(plot)
    timed = interleave({f"{n}": (lambda p=plots[n]: frame_ms(p)) for n in sizes}, repeats)
    raw = interleave({f"{n}": (lambda m=models[n]: raw_frame_ms(m)) for n in raw_sizes}, 1 if smoke() else 3 if quick
                     else 5)
    scratch.cleanup()
    base = stats(timed[str(sizes[0])])[1]
    lines = ["| logged steps | frame (ms) | vs 1k | plotext on the raw points, no reduction (ms) |",
             "|---:|---:|---:|---:|"]
    for n in sizes:
        mid = stats(timed[str(n)])[1]
        raw_cell = fmt_stats(raw[str(n)], ".0f") if str(n) in raw else "not run (≈ 10–40 µs × points)"
        lines.append(f"| {n:,} | {fmt_stats(timed[str(n)], '.1f')} | {mid / base:.2f}× | {raw_cell} |")
    worst = max(stats(v)[1] for v in timed.values())
    flat = stats(timed[str(sizes[-1])])[1] / base
    body = "\n".join(lines) + (f"\n\nPlot area {WIDTH}×{HEIGHT} cells (the 120×40 layout), full-history view, "
                               f"median (min–max) of {repeats} interleaved rounds.")
    top = f"{sizes[-1] // 1000:,}k" if sizes[-1] < 1_000_000 else "1M"
    verdicts = [verdict(f"loss-plot frame, worst size up to {top} steps (dashboard issue)", worst, GOAL_MS,
                        higher_is_better=False, unit=" ms"),
                verdict(f"loss-plot frame, worst size up to {top} steps (benchmarks issue)", worst, 50.0,
                        higher_is_better=False, unit=" ms"),
                verdict(f"frame time {top} ÷ 1k steps", flat, 1.5, higher_is_better=False, unit="×")]
    return Section("Loss-plot frame time vs history length",
                   f"python -m bench --only plot_render{' --quick' if quick else ''}", body, verdicts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    section = run(quick=parser.parse_args().quick)
    print(section.body)
    for line in section.verdicts:
        print(line)


if __name__ == "__main__":
    main()
