"""Fast steps: the engine's own per-step costs where they dominate (a small model's GPU step, emulated on CPU).

A GPU step of a small model takes a few milliseconds, so whatever the engine
does per step (the step event, the control poll, the status heartbeat, memory
sampling, host syncs) is a large share of it. The ``toy`` task shrunk to a
step of about a millisecond (dim 16, depth 1, 2 channels × 60 minutes,
batch 1: the bare loop's ~1,000 steps/s on the 2-core box) puts the CPU in that
regime.

(a) **bare loop**: the same model and batches, built inline: make_batch →
    forward → backward → clip → AdamW → ``float(loss)``; the torch threads the
    engine's plan gives it (engine.training.threads), so threads are not the difference;
(b) **engine**: ``engine.app.main.run_prepared`` as ``train --headless`` runs it
    (events.jsonl, console lines to /dev/null, status heartbeat, control
    server, system sampler), every default, in this process;
    (a) and (b) interleaved; steps/s between 10 % and 90 % of each run from the
    step times (the engine's from a sink on its event bus);
(c) **dashboard attached ÷ alone**: one headless engine process on the same
    settings, a viewer (`attach` in a 120×40 pty) attached and detached in
    alternating slices (bench.viewer_slices);
(d) **the viewer keeps up**: the viewer's reader (engine.run.steps) reads every step's metrics
    from the engine run's step record; steps read per CPU-second ÷ steps written per
    second, and the same per million steps. Above 1 the viewer never falls behind.
(e) **the deferred readback on CPU**: the engine with ``runtime.step_readback=deferred`` (the CUDA path),
    interleaved with the rest: ÷ the synchronous default, which CPU keeps unless this is above 1;
(f) **the tiny LoRA LM** (a 1-layer Llama of width 16, 16 tokens, batch 1, rank 2): bare loop and engine,
    interleaved with the toy's; transformers' Python per layer keeps it under 1,000 steps/s on a CPU;
(g) **host syncs a step**, counted on both readback paths (bench.host_syncs).
Goal (GPU issue): engine ÷ bare ≥ 0.95 at the default logging settings, on the toy and the LoRA LM.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Section, fmt_stats, interleave, ratios, smoke, standalone, stats, verdict
from bench.run_events import window

#: The fast toy: (section, field) overrides shared by both loops.
FAST = {"model": {"dim": 16, "depth": 1}, "data": {"channels": 2, "minutes": 60, "val_samples": 4},
        "train": {"batch_size": 1}, "evaluation": {"every": 0}, "checkpoint": {"every_steps": 0}}


#: The tiny LoRA LM shrunk to its fastest steps: a 1-layer Llama of width 16, 16 tokens, batch 1, rank 2.
FAST_LM = {"lm": {"finetune": "lora", "seq_len": 16, "corpus_bytes": 50_000, "val_samples": 2, "lora": {"r": 2},
                  "model": {"hidden_size": 16, "layers": 1, "heads": 2, "kv_heads": 1, "intermediate_size": 32}},
           "train": {"batch_size": 1}, "evaluation": {"every": 0}, "checkpoint": {"every_steps": 0}}
#: The variants by task: (task, preset, overrides).
TASKS = {"toy": ("toy", "demo", FAST), "lm": ("lm", "tiny", FAST_LM)}


def _config(steps: int, task: str = "toy", **runtime):
    from engine.core import config as cfg

    name, preset, fast = TASKS[task]
    overrides = {k: dict(v) for k, v in fast.items()}
    overrides["train"].update(max_steps=steps)
    overrides["runtime"] = runtime
    return cfg.load(task=name, preset=preset, overrides=overrides)


def _planned_threads() -> int:
    from engine.training import threads

    return threads.plan(threads.usable_cores(), viewer=False, costs=None, steps_left=0).threads


#: A careful GPU loop reads its loss now and then, not every step (a read waits for the device): every this many.
GPU_READ_EVERY = 50


def bare_loop(steps: int, task_name: str = "toy", device: str = "cpu") -> dict:
    """Steps/s of the hand-written loop over the task's fast model (window 10-90 %) on ``device``.

    On CPU it reads the loss every step, as the engine's synchronous readback does (a read waits for nothing
    there). On a GPU it copies each batch without blocking and reads the loss every ``GPU_READ_EVERY`` steps, and
    at the window's two edges, so the steps timed are steps the device finished."""
    import torch

    from engine.budget.step import make_optimizer
    from engine.core.registry import load_task_class

    config = _config(steps, task_name)
    target = torch.device(device)
    on_device = target.type != "cpu"
    torch.set_num_threads(_planned_threads())
    torch.manual_seed(0)
    task = load_task_class(config.task.name)(config)
    task.setup(None)
    model = task.build_model().to(target)
    optimizer = make_optimizer(model, config)
    params = list(model.parameters())  # once: model.parameters() walks the modules, ~20 µs a step here
    batch = config.train.batch_size
    edges = window(steps, 0.1, 0.9)
    marks = []
    for step in range(steps):
        data = task.make_batch(list(range(step * batch, (step + 1) * batch)), step, train=True)
        if on_device:
            data = {k: v.to(target, non_blocking=True) for k, v in data.items()}
        loss, _ = task.loss(model, data, step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, config.optimizer.clip_grad_norm)
        optimizer.step()
        if not on_device or (step + 1) % GPU_READ_EVERY == 0 or step + 1 in edges:
            float(loss.detach())
        marks.append((step + 1, time.perf_counter(), time.process_time()))
    return _rates(marks, steps)


def _rates(marks: list[tuple[int, float, float]], steps: int) -> dict:
    """Wall steps/s and CPU µs a step (the process's, all threads) between 10 % and 90 % of the run."""
    lo, hi = window(steps, 0.1, 0.9)
    at = {s: (wall, cpu) for s, wall, cpu in marks}
    (w0, c0), (w1, c1) = at[lo], at[hi]
    return {"steps_per_s": (hi - lo) / (w1 - w0), "cpu_us": (c1 - c0) / (hi - lo) * 1e6}


def engine_run(steps: int, root: Path, keep: list | None = None, task: str = "toy", **runtime) -> float:
    """Steps/s of the engine as `train --headless` runs it, in this process (window 10-90 %); ``runtime``:
    overrides of the [runtime] section (e.g. the step readback)."""
    from engine.app.main import run_prepared
    from engine.app.prepare import Prepared
    from engine.run.rundir import RunDir

    config = _config(steps, task, **runtime)
    run_dir = RunDir(root / f"engine-{time.monotonic_ns()}")
    config = config.model_copy(update={"name": run_dir.root.name})
    marks: list[tuple[int, float, float]] = []

    def clock(event) -> None:  # one more sink: what a viewer's in-memory sink costs, ~1 µs
        if event.type == "step":
            marks.append((event.step, time.perf_counter(), time.process_time()))

    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        code = run_prepared(Prepared(config, run_dir, None), console=True, install_signals=False,
                            extra_sinks=[clock])
    if code != 0:
        raise RuntimeError(f"engine run exited {code}")
    if keep is not None:
        keep.append(run_dir.root)
    return _rates(marks, steps)


def gpu_probe(steps: int = 2000, rounds: int = 4, lm_steps: int = 600) -> dict:
    """The GPU script's fast-steps row (bench.gpu_probe's kind ``fast``): the bare loop and the engine on CUDA,
    toy and tiny LoRA LM, interleaved ``rounds`` times; steps/s of each run by variant."""
    with tempfile.TemporaryDirectory(prefix="bench-fast-gpu-") as tmp:
        variants = {"bare": lambda: bare_loop(steps, device="cuda"),
                    "engine": lambda: engine_run(steps, Path(tmp), device="cuda"),
                    "bare_lm": lambda: bare_loop(lm_steps, "lm", device="cuda"),
                    "engine_lm": lambda: engine_run(lm_steps, Path(tmp), task="lm", device="cuda")}
        results = interleave(variants, rounds)
    return {name: [run["steps_per_s"] for run in runs] for name, runs in results.items()}


def gpu_line(row: dict, verdicts: list[str]) -> str:
    """The GPU section's line for the ``fast`` row (bench.gpu_section), and its verdicts."""
    if "error" in row:
        return f"**Fast steps on the GPU**: error: {row['error']}"
    toy, lm = ratios(row["engine"], row["bare"]), ratios(row["engine_lm"], row["bare_lm"])
    verdicts += [verdict("GPU fast steps: engine ÷ bare loop steps/s (toy)", stats(toy)[1], 0.95),
                 verdict("GPU fast steps: engine ÷ bare loop steps/s (tiny LoRA LM)", stats(lm)[1], 0.95),
                 verdict("GPU fast steps: bare loop steps/s (toy)", stats(row["bare"])[1], 1000.0),
                 verdict("GPU fast steps: bare loop steps/s (tiny LoRA LM)", stats(row["bare_lm"])[1], 1000.0)]
    return (f"**Fast steps on the GPU** ({len(toy)} interleaved rounds; the bare loop reads its loss every "
            f"{GPU_READ_EVERY} steps, the engine every step without a host sync): toy bare "
            f"{fmt_stats(row['bare'], '.0f')} steps/s, engine ÷ bare **{fmt_stats(toy)}**; tiny LoRA LM bare "
            f"{fmt_stats(row['bare_lm'], '.0f')} steps/s, engine ÷ bare **{fmt_stats(lm)}**.")


def engine_argv(run_dir: Path) -> list[str]:
    """The same fast toy as a headless engine process for a million steps (the viewer slices)."""
    flags = ["--task", "toy", "--max-steps", "1000000", "--run-dir", str(run_dir), "--headless"]
    for section, fields in FAST.items():
        for key, value in fields.items():
            flags += ["--set", f"{section}.{key}={value}"]
    return [sys.executable, "-m", "tui.cli", "train", *flags]


def viewer_read_rate(run_dir: Path) -> tuple[float, int]:
    """(steps the viewer's reader reads from the run's step record per CPU-second, every metric of each; steps)."""
    from engine.run.steps import read_steps

    start = time.process_time()
    steps = len(read_steps(run_dir)["step"])
    return steps / max(time.process_time() - start, 1e-9), steps


def measure_slices(pairs: int, slice_s: float, warm_s: float) -> dict:
    """bench.viewer_slices on the fast toy engine."""
    from bench import viewer_slices

    with tempfile.TemporaryDirectory(prefix="bench-fast-slices-") as tmp:
        return viewer_slices.measure(Path(tmp), pairs, slice_s, warm_s, presses=0, argv=engine_argv)


def measure(steps: int, rounds: int, lm_steps: int | None = None) -> dict:
    """The bare and engine loops interleaved (toy: also the deferred readback; the tiny LoRA LM), the viewer's
    read rate of the last engine run, and host reads a step counted on both readback paths."""
    from bench import host_syncs

    with tempfile.TemporaryDirectory(prefix="bench-fast-") as tmp:
        kept: list[Path] = []
        variants = {"bare": lambda: bare_loop(steps), "engine": lambda: engine_run(steps, Path(tmp), kept),
                    "engine_deferred": lambda: engine_run(steps, Path(tmp), step_readback="deferred")}
        if lm_steps:  # (not in the smoke run: importing transformers is most of its cost)
            variants.update(bare_lm=lambda: bare_loop(lm_steps, "lm"),
                            engine_lm=lambda: engine_run(lm_steps, Path(tmp), task="lm"))
        results = interleave(variants, rounds)
        results["read_rate"], results["read_steps"] = viewer_read_rate(kept[-1])
    n = min(steps, 200)
    results["syncs"] = {mode: host_syncs.count(_config(n, step_readback=mode, prefetch=False), n)
                        for mode in ("sync", "deferred")}
    return results


def run(quick: bool = False) -> Section:
    """Suite entry: full 2000 steps × 10 rounds and 5 slice pairs of 10 s; quick 1500 × 3 and 5 × 5 s.

    Many short rounds rather than a few long ones: a run's rate differs from the next one's by ~5 % on this
    kind of box whatever its length (each run builds its model anew), so the median's error shrinks with the
    number of pairs, not with the steps a run."""
    if smoke():
        steps, rounds, slices_cfg, lm_steps = 40, 1, None, 0
    elif quick:
        steps, rounds, slices_cfg, lm_steps = 1500, 3, (5, 5.0, 3.0), 600
    else:
        steps, rounds, slices_cfg, lm_steps = 2000, 10, (5, 10.0, 4.0), 1000
    results = measure(steps, rounds, lm_steps)
    slices = measure_slices(*slices_cfg) if slices_cfg else None
    return section(results, slices, steps, rounds, quick)


def section(results: dict, slices: dict | None, steps: int, rounds: int, quick: bool) -> Section:
    """The page section from measured (or, in the smoke test, given) numbers."""
    wall = {k: [r["steps_per_s"] for r in results[k]] for k in ("bare", "engine")}
    cpu = {k: [r["cpu_us"] for r in results[k]] for k in ("bare", "engine")}
    ratio = ratios(wall["engine"], wall["bare"])
    cpu_ratio = ratios(cpu["bare"], cpu["engine"])  # CPU a step, bare ÷ engine: the same sense as steps/s
    engine_rate = stats(wall["engine"])[1]
    headroom = results["read_rate"] / engine_rate if engine_rate == engine_rate and engine_rate else float("nan")
    lines = [f"`toy` task shrunk to fast steps (dim 16, depth 1, 2 × 60 inputs, batch {FAST['train']['batch_size']}), "
             f"{steps} steps a run, "
             f"{rounds} interleaved round(s), between 10 % and 90 % of each run, CPU. CPU µs a step counts every "
             "thread of the process (the engine's heartbeat, sampler and control server included); on a shared "
             "box it moves less than wall time does.", "",
             "| variant | steps/s | ÷ bare | CPU µs a step | bare ÷ this (CPU) |", "|---|---:|---:|---:|---:|",
             f"| bare loop (same model, batches inline) | {fmt_stats(wall['bare'], '.0f')} | 1 | "
             f"{fmt_stats(cpu['bare'], '.0f')} | 1 |",
             f"| engine, defaults (`train --headless`: events, console, heartbeat, control server) | "
             f"{fmt_stats(wall['engine'], '.0f')} | **{fmt_stats(ratio)}** | {fmt_stats(cpu['engine'], '.0f')} | "
             f"**{fmt_stats(cpu_ratio)}** |"]
    verdicts = [verdict("fast steps: engine ÷ bare loop steps/s (toy, default logging)", stats(ratio)[1], 0.95),
                verdict("fast steps: bare ÷ engine CPU a step (toy, default logging)", stats(cpu_ratio)[1], 0.95),
                verdict("fast steps: bare loop steps/s (the regime where per-step costs dominate)",
                        stats(wall["bare"])[1], 1000.0)]
    lines += _more_rows(results, verdicts, ratio)
    if slices is not None:
        pair = ratios(slices["viewer"], slices["bare"])
        lines.append(f"| engine process + dashboard attached ({len(pair)} slice pairs) | "
                     f"{fmt_stats(slices['viewer'], '.0f')} | **{fmt_stats(pair)}** ÷ the same engine alone | | |")
        verdicts.append(verdict("fast steps: dashboard attached ÷ alone steps/s (slices)", stats(pair)[1], 0.95)
                        + f"; spread {min(pair):.3f}–{max(pair):.3f} over {len(pair)} pairs")
    lines += ["", f"The viewer's reader (engine.run.steps) read the last engine run's {results['read_steps']:,} "
              f"steps, every metric of each, from its step record at {results['read_rate']:,.0f} steps per "
              f"CPU-second, {headroom:,.0f}× the rate the engine wrote them: a million steps read in "
              f"{1e6 / results['read_rate']:.1f} CPU-s, and the viewer does not fall behind while it runs."]
    verdicts.append(verdict("fast steps: viewer read rate ÷ engine write rate", headroom, 1.0))
    return Section("Fast steps: the engine's per-step cost", "python -m bench --only engine_overhead_fast"
                   + (" --quick" if quick else ""), "\n".join(lines), verdicts)


def _more_rows(results: dict, verdicts: list[str], ratio: list[float]) -> list[str]:
    """The deferred readback's row (toy), the tiny LoRA LM's rows, and host reads a step on both paths."""
    lines = []
    if results.get("engine_deferred"):
        deferred = [r["steps_per_s"] for r in results["engine_deferred"]]
        bare = [r["steps_per_s"] for r in results["bare"]]
        vs_sync = ratios(deferred, [r["steps_per_s"] for r in results["engine"]])
        lines.append(f"| engine, `runtime.step_readback=deferred` (the CUDA path, on CPU) "
                     f"| {fmt_stats(deferred, '.0f')} "
                     f"| **{fmt_stats(ratios(deferred, bare))}** | | ÷ sync (the CPU default): "
                     f"**{fmt_stats(vs_sync)}** |")
        verdicts.append(f"fast steps: deferred ÷ sync readback steps/s on CPU: {stats(vs_sync)[1]:.3f} "
                        "(CPU keeps sync unless this is above 1)")
    if results.get("bare_lm"):
        bare = [r["steps_per_s"] for r in results["bare_lm"]]
        engine = [r["steps_per_s"] for r in results["engine_lm"]]
        lm_ratio = ratios(engine, bare)
        lines += [f"| tiny LoRA LM (1 layer, width 16, 16 tokens, batch 1, r 2): bare loop | {fmt_stats(bare, '.0f')} "
                  "| 1 | | |",
                  f"| tiny LoRA LM: engine, defaults | {fmt_stats(engine, '.0f')} | **{fmt_stats(lm_ratio)}** | | |"]
        verdicts += [verdict("fast steps: engine ÷ bare loop steps/s (tiny LoRA LM)", stats(lm_ratio)[1], 0.95),
                     verdict("fast steps: bare loop steps/s (tiny LoRA LM)", stats(bare)[1], 1000.0)]
    if results.get("syncs"):
        counted = results["syncs"]
        lines += ["", f"Host syncs a step, counted on CPU on the code path CUDA takes (bench.host_syncs: device "
                  f"tensors read to the host, outside evaluations and checkpoints): synchronous readback "
                  f"{counted['sync']:.2f}, deferred {counted['deferred']:.2f}. The GPU script counts the real ones "
                  "(torch.cuda.set_sync_debug_mode)."]
        verdicts.append(verdict("host syncs a step, deferred readback (counted on CPU)", counted["deferred"], 0.0,
                                higher_is_better=False))
    return lines


if __name__ == "__main__":
    standalone(run, __doc__)
