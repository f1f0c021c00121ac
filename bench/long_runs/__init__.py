"""Long runs at any length (issue 38's acceptance): `python -m bench --only long_runs` or `python -m bench.long_runs`.

Runs of 1M, 10M and 100M steps are written under a scratch directory (the system's temp dir, or ``--dir``;
deleted as each is done unless ``--keep``) as this version writes them (bench.long_runs.generate: the step
record through StepWriter.append_columns, with an engine's events.jsonl beside it), and the real viewer,
`sensorlm-tui attach` in a 120×40 tmux pane (bench.long_runs.viewer), is measured on each:

- **first full frame** in a fresh process with the files in page cache (an unmeasured open first reads what
  the viewer reads; the section says how much of the run the cache held): the progress panel at the run's last
  step and a chart drawn. Goal ≤ 1.5 s at 100M steps;
- the viewer's **steady RSS** (median after the first frame) **and its peak** (VmHWM), for the finished run and
  for a live one (a writer process, bench.long_runs.live, appending at ≥ 1,000 steps/s through the engine's
  own sinks while the viewer follows). Goal ≤ 300 MiB at 10M and 100M steps;
- **bytes on disk per step** of the step record, and of the whole run directory (no checkpoint files are
  written). Goals ≤ 64 B and ≤ 8 GB at 100M steps;
- **zoom and pan to random windows**: keys in the real app, each key's frame time from the app's own frame log
  (bench/hooks); beside it the record reads such a frame costs. Goal ≤ 100 ms a frame at 100M steps;
- the **one-time conversion** of a 10M-step run in the old JSON-lines form (bench.open_run.write_run): in a
  fresh process (engine.run.steps.convert), and in the viewer, whose status line must show a progress bar.

Also: runs of a plain loop logging 1,000 and 10,000 metric names (first frame ≤ 2 s, RSS ≤ 300 MiB); a live
soak of ≥ 1M steps (viewer growth ≤ 16 MiB, lag behind the writer ≤ 1 s throughout, at ≥ 1,000 steps/s); and
fast steps, engine ÷ bare ≥ 0.95 (bench.engine_overhead_fast's toy row, called here; the engine writes the
step record on its drainer thread). The load average is sampled every second through the whole section.

A viewer that outgrows ``rss_cap_mib`` (5 GiB) is killed and its row says so: the viewer before issue 38
reached 14.6 GB on 10,000 names. ``BENCH_SMOKE=1``: a few thousand steps, seconds (numbers meaningless).

In parts, a process each (the soak alone is a quarter of an hour at 1,100 steps/s):
``python -m bench.long_runs --parts sizes,old,names,fast --results FILE --write``, then ``--parts soak`` with the
same FILE: each run keeps its results in FILE (bench.long_runs.saved), and the section put on the page is built
from every part in it.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.common import LoadSampler, Section, smoke
from bench.long_runs.saved import PARTS

M = 1_000_000


@dataclasses.dataclass
class Plan:
    """What one run of the section measures (``plan(quick)`` gives the suite's)."""

    sizes: tuple[int, ...] = (M, 10 * M, 100 * M)
    old: int = 10 * M  # steps of the old-form run converted
    names: tuple[int, ...] = (1000, 10_000)
    soak: int = M  # steps of the live soak
    rate: float = 1100.0  # the live writer's steps a second (the goal is ≥ 1,000: room for its own jitter)
    repeat: int = 3  # measured opens of each finished run
    warm: bool = True  # an unmeasured open first (the page cache)
    hold_s: float = 5.0  # seconds after a first frame over which the steady RSS is taken
    live_s: float = 60.0  # seconds each live phase lasts
    keys: int = 20  # zoom and pan keys on the last open of each size
    fast: tuple[int, int] | None = (2000, 5)  # engine_overhead_fast's steps and rounds; None: not measured
    rss_cap_mib: float = 5120.0
    timeout_s: float = 300.0
    directory: Path | None = None
    keep: bool = False
    parts: tuple[str, ...] = PARTS  # which of the section's parts are measured (bench.long_runs.saved)


def plan(quick: bool = False) -> Plan:
    """The suite's plan: full, ``--quick`` (1M and 10M, a 100k-step soak) or smoke (thousands of steps)."""
    if smoke():
        return Plan(sizes=(5000,), old=5000, names=(100,), soak=6000, repeat=1, warm=False, hold_s=1.0, live_s=2.0,
                    keys=3, fast=None, timeout_s=120.0)
    if quick:
        return Plan(sizes=(M, 10 * M), old=M, soak=100_000, repeat=2, live_s=20.0, keys=10, fast=(1500, 3))
    return Plan()


def measure(chosen: Plan) -> tuple[dict, LoadSampler]:
    """Every measurement of ``chosen`` (bench.long_runs.steps), the load sampled through it; the runs are written
    under a fresh scratch directory, removed at the end unless ``chosen.keep``."""
    from bench.long_runs import steps

    scratch = Path(tempfile.mkdtemp(prefix="bench-long-runs-", dir=chosen.directory))
    load = LoadSampler().start()
    try:
        return steps.measure_all(chosen, scratch, load), load
    finally:
        load.stop()
        if not chosen.keep:
            shutil.rmtree(scratch, ignore_errors=True)


def run(quick: bool = False, the_plan: Plan | None = None) -> Section:
    """Suite entry: measure ``the_plan`` (default ``plan(quick)``) and return the page's section."""
    from bench.long_runs import section

    chosen = the_plan or plan(quick)
    results, load = measure(chosen)
    command = "python -m bench --only long_runs" + (" --quick" if quick else "")
    return section.build(results, chosen, load, command)


def _count(text: str) -> int:
    """'100M', '10k', '5000' → steps."""
    scale = {"k": 1000, "m": M}.get(text[-1:].lower(), 1)
    try:
        return int(float(text[:-1] if scale > 1 else text) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a count such as 5000, 10k or 100M") from None


def _parts(text: str) -> tuple[str, ...]:
    parts = tuple(text.split(","))
    unknown = [part for part in parts if part not in PARTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"{','.join(unknown)}: not a part; the parts are {','.join(PARTS)}")
    return parts


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.long_runs", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1M and 10M steps, a 100k-step soak")
    parser.add_argument("--parts", type=_parts, default=None,
                        help=f"some of {','.join(PARTS)} (default all): the section in parts, with --results")
    parser.add_argument("--results", type=Path, default=None, metavar="FILE",
                        help="JSON the parts' results are kept in: each run adds its parts (a part measured again "
                             "replaces its earlier results) and the section is built from them all")
    parser.add_argument("--write", action="store_true", help="put the section into docs/BENCHMARKS.md")
    parser.add_argument("--sizes", type=lambda text: tuple(map(_count, text.split(","))), default=None,
                        help="steps of each finished run, e.g. 1M,10M,100M")
    parser.add_argument("--old", type=_count, default=None, help="steps of the old-form run converted")
    parser.add_argument("--names", type=lambda text: tuple(map(_count, text.split(","))), default=None,
                        help="metric names of each plain-loop run, e.g. 1000,10000")
    parser.add_argument("--soak", type=_count, default=None, help="steps of the live soak")
    parser.add_argument("--rate", type=float, default=None,
                        help="the live writer's steps a second (default 1100; the goal is at >= 1000)")
    parser.add_argument("--repeat", type=int, default=None, help="measured opens of each finished run")
    parser.add_argument("--rss-cap-mib", type=float, default=None, help="kill a viewer past this RSS (default 5120)")
    parser.add_argument("--no-fast", action="store_true", help="leave out the fast-steps row")
    parser.add_argument("--dir", type=Path, default=None, help="where the runs are written (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="leave the runs on disk")
    args = parser.parse_args(argv)
    if args.rate is not None and not args.rate > 0:
        parser.error(f"--rate {args.rate:g}: must be > 0 (steps a second)")
    if args.write and args.parts is not None and set(args.parts) != set(PARTS) and args.results is None:
        parser.error("--write with --parts needs --results FILE: the page's section is built from every part")
    if args.repeat is not None and args.repeat < 1:
        parser.error(f"--repeat {args.repeat}: must be >= 1 (measured opens)")
    return args


def main(argv: list[str] | None = None) -> int:
    """Command line: the parts, sizes and counts, --results, --write, --dir, --keep; prints the section."""
    from bench import page
    from bench.common import machine
    from bench.long_runs import saved, section

    args = _arguments(argv)
    chosen = plan(args.quick)
    changes = {"sizes": args.sizes, "old": args.old, "names": args.names, "soak": args.soak, "directory": args.dir,
               "repeat": args.repeat, "rss_cap_mib": args.rss_cap_mib, "parts": args.parts, "rate": args.rate}
    chosen = dataclasses.replace(chosen, **{k: v for k, v in changes.items() if v is not None}, keep=args.keep)
    if args.no_fast:
        chosen.fast = None
    facts = machine()  # before the run: its load average is the neighbours'
    start = time.perf_counter()
    results, load = measure(chosen)
    command = " ".join(["python -m bench.long_runs", *(sys.argv[1:] if argv is None else argv)])
    commands = [command]
    if args.results is not None:
        results, load, commands = saved.record(args.results, chosen.parts, results, load, command)
    built = section.build(results, chosen, load, " && ".join(commands))
    built.show()
    print(f"({time.perf_counter() - start:.0f} s)")
    if args.write:
        target = page.ROOT / "docs" / "BENCHMARKS.md"
        target.write_text(page.merge_page(target.read_text(), [built], command, facts))
        print(f"updated {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
