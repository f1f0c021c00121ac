"""Engine overhead vs plain PyTorch: the same SensorLM model, batch and data, the same number of steps.

(a) a minimal hand-written loop: make_batch → forward → backward → clip → AdamW step, nothing else (the
    same optimizer groups and gradient clipping the config asks of the Trainer: the algorithm, not overhead);
(b) the engine's Trainer with default logging (events.jsonl + console lines to /dev/null), eval off, its
    batches built ahead on one thread (``runtime.data_workers = 0``, engine.training.prefetch);
(c) the same with ``runtime.prefetch = false``: every batch built inline, as the plain loop does, so
    (b)/(c) is what building the next batch on a background thread buys (1 torch thread, so the
    prefetch thread has the second core). This row is why the hand-written thread stays beside the
    DataLoader: torch.utils.data has worker processes only, which the in-process dashboard cannot
    start and a short run does not repay;
(d) ``runtime.data_workers = 1``: the batches built in a DataLoader worker process instead (no GIL shared).
Steps/s is timed between the end of the first and the end of the last step of each run, so set-up,
the step-0 baseline eval and the checkpoints at both ends are outside the window in both variants.
Goal: ratio (b)/(a) ≥ 0.98.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from bench.common import Section, fmt_stats, interleave, ratios, smoke, stats, verdict

PRESET = "demo"


def _config(steps: int, batch: int, prefetch: bool = True, workers: int = 0):
    from engine.core import config as cfg

    return cfg.load(preset=PRESET, overrides={"train": {"max_steps": steps, "batch_size": batch},
                                              "evaluation": {"every": 0},
                                              "runtime": {"prefetch": prefetch, "data_workers": workers},
                                              "checkpoint": {"every_steps": 0}})


def plain_loop(steps: int, batch: int) -> float:
    """Steps/s of the hand-written loop."""
    import torch

    from engine.budget.step import make_optimizer
    from engine.core.registry import load_task_class

    config = _config(steps, batch)
    torch.manual_seed(0)
    task = load_task_class(config.task.name)(config)
    task.setup(None)
    model = task.build_model()
    optimizer = make_optimizer(model, config)  # AdamW, decay / no-decay groups, as the Trainer builds it
    max_norm = config.optimizer.clip_grad_norm if config.optimizer.clip_grad_norm > 0 else float("inf")
    marks = []
    for step in range(steps):
        indices = list(range(step * batch, (step + 1) * batch))
        data = task.make_batch(indices, step, train=True)
        loss, _ = task.loss(model, data, step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        float(loss.detach())  # the engine reads the loss every step; so does any loop that prints it
        marks.append(time.perf_counter())
    return (len(marks) - 1) / (marks[-1] - marks[0])


def engine_loop(steps: int, batch: int, prefetch: bool = True, workers: int = 0) -> float:
    """Steps/s of the Trainer with its default sinks (events.jsonl and console) attached."""
    from engine.run.control.requests import Controls
    from engine.run.sinks import ConsoleSink, EventBus, JsonlSink
    from engine.training.loop import Trainer

    config = _config(steps, batch, prefetch, workers)
    with tempfile.TemporaryDirectory() as tmp, open(os.devnull, "w") as devnull:
        marks = []
        jsonl = JsonlSink(Path(tmp) / "events.jsonl")

        def clock(event) -> None:
            if event.type == "step":
                marks.append(time.perf_counter())

        bus = EventBus([jsonl, ConsoleSink(devnull, print_every=config.train.print_every), clock])
        Trainer(config, bus, Controls(), checkpoint_dir=Path(tmp) / "ckpt").run()
        bus.close()
    # Worker processes start (spawn, import torch) while the first steps run: steady state begins after them.
    marks = marks[workers:]
    return (len(marks) - 1) / (marks[-1] - marks[0])


def run(quick: bool = False) -> Section:
    """Interleave the two loops and report the ratio."""
    import torch

    torch.set_num_threads(1)
    steps, repeats, batch = (4, 1, 4) if smoke() else (16, 2, 16) if quick else (60, 5, 16)
    results = interleave({"plain": lambda: plain_loop(steps, batch), "engine": lambda: engine_loop(steps, batch),
                          "inline": lambda: engine_loop(steps, batch, prefetch=False),
                          "worker": lambda: engine_loop(steps, batch, workers=1)}, repeats)
    ratio = ratios(results["engine"], results["plain"])
    gain = ratios(results["engine"], results["inline"])
    process_gain = ratios(results["worker"], results["inline"])
    body = "\n".join([
        f"SensorLM `{PRESET}` preset, batch {batch}, {steps} steps per run, {repeats} interleaved rounds, "
        "1 torch thread, CPU.", "",
        "| variant | steps/s |", "|---|---|",
        f"| plain PyTorch loop | {fmt_stats(results['plain'], '.2f')} |",
        f"| engine (Trainer, default logging) | {fmt_stats(results['engine'], '.2f')} |",
        f"| engine, `runtime.prefetch = false` | {fmt_stats(results['inline'], '.2f')} |",
        f"| engine, `runtime.data_workers = 1` (a DataLoader worker process) | {fmt_stats(results['worker'], '.2f')} |",
        f"| **ratio engine / plain** | **{fmt_stats(ratio)}** |",
        f"| **ratio prefetch on / off** (the builder thread's gain: why engine.training.prefetch is kept beside the "
        f"DataLoader, which has no thread mode) | **{fmt_stats(gain)}** |",
        f"| **ratio 1 data worker / prefetch off** | **{fmt_stats(process_gain)}** |",
    ])
    return Section("Engine overhead vs plain PyTorch",
                   f"python -m bench --only engine_overhead{' --quick' if quick else ''}",
                   body, [verdict("engine/plain steps/s", stats(ratio)[1], 0.98),
                          verdict("engine: prefetch on ÷ off steps/s", stats(gain)[1], 1.0)])


if __name__ == "__main__":
    section = run(quick="--quick" in os.sys.argv)
    print(section.body)
    print("\n".join(section.verdicts))
