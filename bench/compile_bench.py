"""torch.compile on CPU: compile ÷ eager per built-in task, and the engine compiled against compiled peers.

(a) **compile ÷ eager, per task**: for each built-in task (toy, SensorLM demo, the LM's tiny LoRA, the
    gap-filler), a headless engine process eager and one with ``--compile`` (the task's blocks; the toy,
    whose one hidden layer is its only block, the whole model), interleaved rounds; steps/s from the
    events between steps ``lo`` and ``hi`` (after the first step, which compiles), and the compile seconds
    the run's CompileDone events report. A win is not required on CPU: the page says what it is.
(b) **engine (compiled) ÷ a compiled plain loop ÷ compiled Lightning**: bench.baselines' fair comparison
    (SensorLM demo, batch 16, the same model, batches, optimizer, clipping and schedule, each variant a
    process of its own) with ``torch.compile(model)`` in each: the engine's ``--compile model``, the
    DataLoader loop's and Lightning's ``--compile model`` (bench.baseline_loops). Quiet rounds only.

Inductor's first compile of a graph costs tens of seconds of C++ on a small box; the FX graph cache
(``TORCHINDUCTOR_CACHE_DIR``, one directory for the whole run) makes the later rounds' compiles cheaper,
which is what a user re-running a job sees too. Each run's compile seconds are reported beside its rate.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, Section, fmt_stats, ratios, smoke, standalone, stats, verdict
from bench.run_events import recorded, steps_per_s

#: (label, task, preset, compile mode, flags) of the per-task rows.
TASKS = [
    ("toy (demo)", "toy", "demo", "model", ("--batch-size", "16")),
    ("SensorLM (demo, b16)", "sensorlm", "demo", "blocks", ("--batch-size", "16", "--set", "data.val_samples=8")),
    ("LM LoRA (tiny, b8)", "lm", "tiny", "blocks", ("--batch-size", "8", "--set", "lm.finetune='lora'",
                                                     "--set", "lm.corpus_bytes=200000")),
    ("gap-filler (demo, b16)", "gapfill", "demo", "blocks", ("--batch-size", "16",
                                                             "--set", "gapfill.samples.val_samples=8")),
]
TIMEOUT_S = 1200.0


def _env() -> dict:
    env = {**os.environ, "NO_COLOR": "1"}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def engine_run(task: str, preset: str, flags: tuple[str, ...], steps: int, window: tuple[int, int],
               root: Path) -> dict:
    """One headless engine process: {steps_per_s, compile_s, recompiles, loss}."""
    run_dir = root / f"{task}-{time.monotonic_ns()}"
    argv = [sys.executable, "-m", "tui.cli", "train", "--headless", "--task", task, "--preset", preset,
            "--max-steps", str(steps), "--eval-every", "0", "--checkpoint-every", "0", "--run-dir", str(run_dir),
            *flags]
    out = subprocess.run(argv, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    if out.returncode != 0:
        raise RuntimeError(f"{task} {' '.join(flags)} exited {out.returncode}: {out.stderr[-600:]}")
    records = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    steps_t = list(recorded(run_dir).items())  # every step's time (the log keeps a step line a second)
    compiles = [r for r in records if r["type"] == "compile"]
    losses = recorded(run_dir, "loss")
    return {"steps_per_s": steps_per_s(steps_t, *window), "compile_s": sum(r["seconds"] for r in compiles),
            "recompiles": sum(r["recompiles"] for r in compiles),
            "loss": losses[max(losses)] if losses else float("nan")}


def per_task(steps: int, window: tuple[int, int], rounds: int, tasks: list = TASKS) -> dict:
    """{label: {"eager": [rows], "compiled": [rows], "mode": mode}}, eager and compiled interleaved."""
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-compile-") as tmp:
        for label, task, preset, mode, flags in tasks:
            variants = {"eager": flags, "compiled": (*flags, "--compile", mode)}
            rows: dict = {"eager": [], "compiled": [], "mode": mode}
            for index in range(rounds):
                for name in (list(variants) if index % 2 == 0 else list(reversed(variants))):
                    rows[name].append(engine_run(task, preset, variants[name], steps, window, Path(tmp)))
                    print(f"   {label} {name}: {rows[name][-1]}", flush=True)
            out[label] = rows
    return out


def vs_peers(steps: int, window: tuple[int, int], rounds: int) -> dict:
    """bench.baselines' engine, DataLoader loop and Lightning, each compiling the model, quiet rounds."""
    from bench import baselines as fair

    results: dict = {"engine": [], "dataloader": [], "lightning": []}
    threads = 1
    with tempfile.TemporaryDirectory(prefix="bench-compile-peers-") as tmp:
        runs = {"engine": lambda: fair.engine_rate(steps, window, Path(tmp), ("--compile", "model")),
                "dataloader": lambda: fair.loop_rate("dataloader", steps, window, threads, "--compile", "model"),
                "lightning": lambda: fair.loop_rate("lightning", steps, window, threads, "--compile", "model")}
        for index in range(rounds):
            for name in (list(runs) if index % 2 == 0 else list(reversed(runs))):
                results[name].append(runs[name]()["steps_per_s"])
                print(f"   compiled {name}: {results[name][-1]:.2f} steps/s", flush=True)
    return results


def run(quick: bool = False) -> Section:
    """Suite entry: full 120 steps (window 40-110) × 3 rounds per task, 100 steps (40-90) × 3 for the peers;
    quick 60 steps (25-55) × 1 and 60 (25-55) × 1; smoke: the toy alone, 12 steps."""
    if smoke():
        return section(per_task(12, (6, 11), 1, TASKS[:1]), None, 12, 1, quick)
    steps, window, rounds = (60, (25, 55), 1) if quick else (120, (40, 110), 3)
    tasks = per_task(steps, window, rounds)
    peers = vs_peers(*((60, (25, 55), 1) if quick else (100, (40, 90), 3)))
    return section(tasks, peers, steps, rounds, quick)


def section(tasks: dict, peers: dict | None, steps: int, rounds: int, quick: bool) -> Section:
    """The page section from measured (or, in the smoke test, given) numbers."""
    lines = [f"Headless engine processes, {steps} steps a run, {rounds} interleaved round(s), steps/s after the "
             "compiling first step; compile seconds from the run's CompileDone events (inductor, one FX graph "
             "cache for the whole run: the first round compiles cold, later ones mostly hit it).", "",
             "| task | mode | eager steps/s | compiled steps/s | compiled ÷ eager | compile s | recompiles |",
             "|---|---|---:|---:|---:|---:|---:|"]
    verdicts = []
    for label, rows in tasks.items():
        eager = [r["steps_per_s"] for r in rows["eager"]]
        comp = [r["steps_per_s"] for r in rows["compiled"]]
        ratio = ratios(comp, eager)
        lines.append(f"| {label} | {rows['mode']} | {fmt_stats(eager, '.1f')} | {fmt_stats(comp, '.1f')} | "
                     f"**{fmt_stats(ratio)}** | {fmt_stats([r['compile_s'] for r in rows['compiled']], '.1f')} | "
                     f"{max(r['recompiles'] for r in rows['compiled'])} |")
        verdicts.append(f"compile ÷ eager on CPU, {label}: {stats(ratio)[1]:.3f} (reported, no goal on CPU)")
    if peers:
        engine, loop, lightning = peers["engine"], peers["dataloader"], peers["lightning"]
        to_loop, to_lightning = ratios(engine, loop), ratios(engine, lightning)
        lines += ["", "Each compiling the model (`torch.compile(model)`; the engine's `--compile model`), SensorLM "
                  "demo, batch 16, one torch thread, quiet (bench.baselines' variants):", "",
                  "| variant | steps/s | engine ÷ this |", "|---|---:|---:|",
                  f"| engine, --compile model | {fmt_stats(engine, '.2f')} | 1 |",
                  f"| DataLoader loop, compiled | {fmt_stats(loop, '.2f')} | **{fmt_stats(to_loop)}** |",
                  f"| Lightning, compiled | {fmt_stats(lightning, '.2f')} | **{fmt_stats(to_lightning)}** |"]
        verdicts += [verdict("compiled: engine ÷ compiled DataLoader loop steps/s", stats(to_loop)[1], 1.0),
                     verdict("compiled: engine ÷ compiled Lightning steps/s", stats(to_lightning)[1], 1.05)]
    return Section("torch.compile on CPU", "python -m bench --only compile_bench" + (" --quick" if quick else ""),
                   "\n".join(lines), verdicts)


if __name__ == "__main__":
    standalone(run, __doc__)
