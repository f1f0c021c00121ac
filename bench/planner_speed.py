"""Planner speed: `plan` wall time, one trace per preset, and what a doubling batch finder would have run.

    python -m bench.planner_speed [--quick]

- ``sensorlm-tui plan --preset P --vram-gb 80``: wall time of the whole
  command (a fresh interpreter, torch never imported), median of 3.
- One traced step per preset (FakeTensorMode + MemTracker subprocess,
  uncached): wall seconds and the worker's peak RSS, next to the peak it
  traced (base at batch 64 is ~100+ GiB: far beyond this machine's RAM).
- A Lightning-style BatchSizeFinder for the same 80 GiB budget (init 2,
  doubling until the first out-of-memory, then bisection; 3 real steps per
  trial, its default), simulated with the analytic model as the oracle: how
  many real training steps — and real OOM crashes — it would have needed.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from bench.common import ROOT, Section, python, smoke

GIB = 1 << 30
STEPS_PER_TRIAL = 3


def plan_wall(preset: str, repeats: int = 3) -> float:
    """Median wall seconds of `sensorlm-tui plan --preset P --vram-gb 80` in a fresh interpreter."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([python(), "-m", "tui.cli", "plan", "--preset", preset, "--vram-gb", "80"], cwd=ROOT,
                       check=True, capture_output=True, stdin=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def finder_steps(config, budget: int) -> tuple[int, int, int]:
    """(real steps, OOM crashes, batch found) of a doubling+bisect finder with the analytic model as the oracle."""
    from engine.budget.analytic import estimate

    def fits(b: int) -> bool:
        return estimate(config, batch_size=b, device="cuda").total <= budget

    trials = ooms = 0
    b, good = 2, 0
    while True:
        trials += 1
        if fits(b):
            good, b = b, b * 2
        else:
            ooms += 1
            break
    low, high = good, b
    while high - low > 1:
        mid = (low + high) // 2
        trials += 1
        if fits(mid):
            low = mid
        else:
            ooms += 1
            high = mid
    return trials * STEPS_PER_TRIAL, ooms, low


def run(quick: bool = False) -> Section:
    """Benchmark-suite entry point."""
    from engine.budget import plan, trace
    from engine.core.config import load

    presets = ["demo"] if smoke() else ["tiny", "base"] if quick else ["demo", "tiny", "small", "base"]
    lines = ["| preset | `plan --vram-gb 80` wall s | in-process plan s | planner's largest batch (sdpa) | "
             "finder real steps (OOMs) | finder's batch |", "|---|---:|---:|---:|---:|---:|"]
    verdicts = []
    for preset in presets:
        config = load(preset=preset, task="sensorlm", overrides={"budget": {"vram_gb": 80}})
        wall = plan_wall(preset, 1 if quick or smoke() else 3)
        start = time.perf_counter()
        p = plan.make_plan(config, plan.resolve_budget(config, None))
        inproc = time.perf_counter() - start
        largest = next(o.largest_batch for o in p.options if o.get("attn_backend") == "sdpa"
                       and not o.get("activation_checkpointing"))
        steps, ooms, found = finder_steps(config, p.budget.bytes)
        lines.append(f"| {preset} | {wall:.2f} | {inproc:.3f} | {largest} | {steps} ({ooms}) | {found} |")
        if preset == "base":
            from bench.common import verdict

            verdicts.append(verdict("`sensorlm-tui plan --preset base --vram-gb 80` wall", wall, 1.0, False, " s"))
    lines += ["", "| preset, batch (fp32) | traced peak GiB | trace wall s | trace worker CPU s (incl. import "
              "torch, task setup) | trace worker RSS MiB |", "|---|---:|---:|---:|---:|"]
    for preset, batch in ([("demo", 2)] if smoke() else [("base", 64)] if quick else
                          [("demo", 16), ("tiny", 16), ("small", 16), ("base", 8), ("base", 64)]):
        config = load(preset=preset, task="sensorlm", overrides={"train": {"batch_size": batch},
                                                                 "runtime": {"precision": "fp32"}})
        start = time.perf_counter()
        raw = trace.run_worker(config)  # the subprocess itself: never cached
        wall = time.perf_counter() - start
        lines.append(f"| {preset}, {batch} | {raw['peak'] / GIB:.2f} | {wall:.1f} | {raw.get('cpu_seconds', 0):.1f} | "
                     f"{raw['max_rss'] / 2**20:.0f} |")
    body = "\n".join(lines) + "\n\n" + (
        "The finder column simulates Lightning's BatchSizeFinder (init 2, doubling, then bisection, 3 steps per "
        "trial) against the same budget with the analytic model deciding fit; every OOM it counts is a real "
        "crash-and-retry on a GPU. The planner runs no step at all.")
    return Section("Planner speed", f"python -m bench --only planner_speed{' --quick' if quick else ''}", body,
                   verdicts)


def main(argv: list[str] | None = None) -> int:
    """Print the section as markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    section = run(args.quick)
    section.show()
    return 0


if __name__ == "__main__":
    sys.exit(main())
