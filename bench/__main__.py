"""`python -m bench [--quick] [--only NAME ...] [--no-write]`: every performance claim, measured in one run.

Runs each benchmark module below in turn (same process tree), prints each
section, and rewrites docs/BENCHMARKS.md with the machine, the date, the
command and every result (min/median/max over repeats). GPU rows run when
CUDA is present and say skipped otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback

from bench.common import Section, machine
from bench.page import write_page

#: Benchmark modules in the order they appear on the results page.
MODULES = [
    "bench.baselines",
    "bench.allocator",
    "bench.engine_overhead",
    "bench.engine_overhead_fast",
    "bench.compile_bench",
    "bench.sensorlm_throughput",
    "bench.lm_throughput",
    "bench.demo_learning",
    "bench.gapfill_learning",
    "bench.dashboard_overhead",
    "bench.plot_render",
    "bench.dashboard_bytes",
    "bench.attention",
    "bench.memory_accuracy",
    "bench.memory_random",
    "bench.cpu_memory",
    "bench.integrations",
    "bench.planner_speed",
    "bench.startup",
    "bench.open_run",
    "bench.attach_open",
    "bench.long_runs",
    "bench.step_record_formats",
    "bench.autotune",
]


def main(argv: list[str] | None = None) -> int:
    """Run the suite; exit 0 even when a goal is missed (the page says so), 1 when a benchmark crashed."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few minutes on 2 CPU cores")
    parser.add_argument("--only", nargs="*", default=None, help="module names (e.g. startup attention)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    parser.add_argument("--gpu", action="store_true", help="the GPU check (bench.gpu): a few minutes on one GPU")
    parser.add_argument("--budget-s", type=float, default=None, metavar="S",
                        help="--gpu: the whole run's budget in seconds (default 480)")
    parser.add_argument("--from-log", action="store_true",
                        help="--gpu: rebuild the page's GPU section from docs/BENCHMARKS-gpu.jsonl (no measuring)")
    args = parser.parse_args(argv)
    if args.gpu:
        from bench import gpu

        if args.budget_s is not None and not args.budget_s > 0:
            parser.error(f"--budget-s={args.budget_s:g}: must be > 0 (seconds)")
        return gpu.main(write=not args.no_write, budget_s=args.budget_s or gpu.BUDGET_S, rebuild=args.from_log)
    sections: list[Section] = []
    failed = 0
    suite_start = time.perf_counter()
    facts = machine()  # before the run: its load average is the neighbours', not ours
    for name in MODULES:
        short = name.split(".")[-1]
        if args.only and short not in args.only:
            continue
        start = time.perf_counter()
        print(f"== {short} ...", flush=True)
        try:
            module = importlib.import_module(name)
            section = module.run(quick=args.quick)
        except Exception:
            failed += 1
            section = Section(short, f"python -m bench --only {short}", f"```\n{traceback.format_exc()}```",
                              skipped="crashed")
        print(section.body)
        for line in section.verdicts:
            print("  " + line)
        print(f"   ({time.perf_counter() - start:.1f} s)", flush=True)
        sections.append(section)
    elapsed = time.perf_counter() - suite_start
    print(f"suite: {elapsed / 60:.1f} min", flush=True)
    if not args.no_write:
        write_page(sections, quick=args.quick, argv=sys.argv[1:] if argv is None else argv, elapsed=elapsed,
                   facts=facts, partial=bool(args.only))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
