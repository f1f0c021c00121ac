"""The engine's allocator setting against glibc's defaults: `python -m bench.allocator [--quick]`.

engine.training.allocator keeps the memory a step frees (glibc mmap threshold 32 MiB,
trim threshold 1 GiB) in the trainer and its data workers. This measures what
that is worth end to end: headless engine runs of the SensorLM ``demo`` preset
(batch 16, the engine's own thread plan), interleaved, with the setting and
without it. "Without" sets ``MALLOC_ARENA_MAX=16``, glibc's own default on 2
cores (8 arenas a core), which changes nothing in malloc but makes the engine
leave the allocator alone (it defers to any ``MALLOC_*`` a user set). Not
``MALLOC_TOP_PAD_``: setting that one switches off glibc's dynamic mmap
threshold, a worse allocator than the default. Steps/s from each run's
events.jsonl (bench.baselines.engine_rate), with the CPU its process tree used.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from bench.common import Section, fmt_stats, ratios, smoke, standalone, stats, verdict

TUNED, DEFAULT = "engine (allocator kept, its default)", "engine, glibc malloc defaults (MALLOC_ARENA_MAX=16)"
#: What each variant's engine process finds in its environment, beside this process's own.
VARIANT_ENV = {TUNED: {}, DEFAULT: {"MALLOC_ARENA_MAX": "16"}}


def measure(steps: int, window: tuple[int, int], rounds: int) -> dict[str, list[dict]]:
    """``rounds`` interleaved pairs (A B, B A, …) of engine runs with and without the setting."""
    from bench.baselines import engine_rate

    results: dict[str, list[dict]] = {TUNED: [], DEFAULT: []}
    with tempfile.TemporaryDirectory(prefix="bench-allocator-") as tmp:
        for index in range(rounds):
            for name in ((TUNED, DEFAULT) if index % 2 == 0 else (DEFAULT, TUNED)):
                results[name].append(engine_rate(steps, window, Path(tmp), env=VARIANT_ENV[name]))
                row = results[name][-1]
                print(f"   round {index + 1}/{rounds} {name}: {row['steps_per_s']:.2f} steps/s, "
                      f"{row['steps_per_cpu_s']:.2f} steps per CPU-s", flush=True)
    return results


def run(quick: bool = False) -> Section:
    """Suite entry: 100 steps (window 20-80) × 6 pairs; quick × 4 pairs; smoke 8 steps × 1."""
    steps, window, rounds = (8, (3, 7), 1) if smoke() else (100, (20, 80), 4 if quick else 6)
    results = measure(steps, window, rounds)
    rate = {name: [r["steps_per_s"] for r in rows] for name, rows in results.items()}
    per_cpu = {name: [r["steps_per_cpu_s"] for r in rows] for name, rows in results.items()}
    gain = ratios(rate[TUNED], rate[DEFAULT])
    lines = [f"SensorLM `demo` preset, batch 16, {steps} steps a run, steps/s between steps {window[0]} and "
             f"{window[1]}, {rounds} interleaved pair(s), each run a process of its own.", "",
             "| variant | steps/s | steps per CPU-second |", "|---|---:|---:|"]
    lines += [f"| {name} | {fmt_stats(rate[name], '.2f')} | {fmt_stats(per_cpu[name], '.2f')} |" for name in results]
    lines += ["", f"Kept ÷ glibc defaults, per pair: **{fmt_stats(gain)}**."]
    return Section("Allocator: freed memory kept vs glibc's defaults",
                   f"python -m bench --only allocator{' --quick' if quick else ''}", "\n".join(lines),
                   [verdict("engine steps/s, allocator kept ÷ glibc defaults", stats(gain)[1], 1.0)])


if __name__ == "__main__":
    standalone(run, __doc__)
