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

from bench.common import ROOT, Section, machine

#: Benchmark modules in the order they appear on the results page.
MODULES = [
    "bench.baselines",
    "bench.allocator",
    "bench.engine_overhead",
    "bench.engine_overhead_fast",
    "bench.sensorlm_throughput",
    "bench.lm_throughput",
    "bench.demo_learning",
    "bench.gapfill_learning",
    "bench.dashboard_overhead",
    "bench.plot_render",
    "bench.dashboard_bytes",
    "bench.attention",
    "bench.memory_accuracy",
    "bench.cpu_memory",
    "bench.planner_speed",
    "bench.startup",
    "bench.open_run",
    "bench.attach_open",
]


def main(argv: list[str] | None = None) -> int:
    """Run the suite; exit 0 even when a goal is missed (the page says so), 1 when a benchmark crashed."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few minutes on 2 CPU cores")
    parser.add_argument("--only", nargs="*", default=None, help="module names (e.g. startup attention)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    parser.add_argument("--gpu", action="store_true", help="the GPU check (bench.gpu): a few minutes on one GPU")
    args = parser.parse_args(argv)
    if args.gpu:
        from bench import gpu

        return gpu.main(write=not args.no_write)
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


#: Why a goal is missed where we know it (verdict prefix → reason), printed under the goal list.
MISS_REASONS: dict[str, str] = {
    "attach_open: 1,000,000 steps → first full frame": "wall time on a loaded 2-core box is mostly the neighbours' "
                                                       "(wall ≈ 3-5× the viewer's CPU at load 6-15); see the CPU "
                                                       "column: before the first frame the viewer decodes only the "
                                                       "newest steps and every other event (cold) or loads "
                                                       "events.index (warm), then folds the newest 4,096 steps; "
                                                       "the rest is interpreter start, imports and the first render",
    "engine process: steps/s with": "the engine's plan keeps both cores of this box busy (1 torch thread + 2 data "
                                    "worker processes), so the viewer's ~3 % CPU and the engine's serving of it "
                                    "come out of training; before prefetch (one core idle) the same slices measured "
                                    "1.03; the slice-to-slice spread is wider than the goal's margin",
    "--in-process ÷ headless": "the trainer shares its process's GIL with the dashboard's rendering (the cost "
                               "--in-process is documented with); its data workers are processes as in headless "
                               "(engine.training.batches starts them under Textual's stdio), and separate runs on this VM "
                               "spread wider than the goal's margin",
}


def write_page(sections: list[Section], quick: bool, argv: list[str], elapsed: float | None = None,
               facts: str | None = None, partial: bool = False) -> None:
    """Rewrite docs/BENCHMARKS.md from the sections just measured (``elapsed``: the suite's wall seconds).

    ``partial`` (``--only``): the page's other sections and their goal lines stay as they were; the
    re-measured ones replace theirs, and a line under the header says when and where they were measured.
    """
    command = "python -m bench" + ("" if not argv else " " + " ".join(argv))
    page = ROOT / "docs" / "BENCHMARKS.md"
    if partial and page.exists():
        page.write_text(merge_page(page.read_text(), sections, command, facts or machine()))
        print(f"updated {page}")
        return
    lines = ["# Benchmarks", "", "Generated by `" + command + "` — do not edit by hand; re-run it.", "",
             f"Machine: {facts or machine()}." + (f" The suite took {elapsed / 60:.1f} min." if elapsed else ""), "",
             "Each result is a ratio measured within one run with the variants interleaved (A B A B …), so",
             "machine drift cancels; absolute times are shown for context only. Cells are median (min–max).", ""]
    summary = [v for s in sections for v in s.verdicts]
    if summary:
        lines += ["## Goals", ""]
        for v in summary:
            why = next((r for prefix, r in MISS_REASONS.items() if v.startswith(prefix)), None)
            lines.append(f"- {v}" + (f" — why: {why}" if why and "MISSED" in v else ""))
        lines.append("")
    for s in sections:
        lines += [f"## {s.title}", "", f"Command: `{s.command}`" + (f" — **{s.skipped}**" if s.skipped else ""), "",
                  s.body, ""]
    (ROOT / "docs").mkdir(exist_ok=True)
    (ROOT / "docs" / "BENCHMARKS.md").write_text("\n".join(lines))
    print(f"wrote {ROOT / 'docs' / 'BENCHMARKS.md'}")


def _blocks(text: str) -> tuple[list[str], dict[str, list[str]], list[str]]:
    """(header lines, {'## title': lines}, titles in order) of a results page."""
    header: list[str] = []
    blocks: dict[str, list[str]] = {}
    order: list[str] = []
    current = header
    for line in text.splitlines():
        if line.startswith("## "):
            order.append(line)
            current = blocks.setdefault(line, [])
        else:
            current.append(line)
    return header, blocks, order


def merge_page(text: str, sections: list[Section], command: str, facts: str) -> str:
    """``text`` (a results page) with ``sections`` replacing (or added after) their namesakes; see write_page."""
    header, blocks, order = _blocks(text)
    new_verdicts = [v for s in sections for v in s.verdicts]
    names = {v.split(": ", 1)[0] for v in new_verdicts}
    goals = [line for line in blocks.get("## Goals", []) if line.startswith("- ")
             and line[2:].split(": ", 1)[0] not in names]
    for v in new_verdicts:
        why = next((r for prefix, r in MISS_REASONS.items() if v.startswith(prefix)), None)
        goals.append(f"- {v}" + (f" — why: {why}" if why and "MISSED" in v else ""))
    blocks["## Goals"] = [""] + goals + [""]
    if "## Goals" not in order:
        order.insert(0, "## Goals")
    for s in sections:
        title = f"## {s.title}"
        blocks[title] = ["", f"Command: `{s.command}`" + (f" — **{s.skipped}**" if s.skipped else ""), "", s.body, ""]
        if title not in order:
            order.append(title)
    note = f"Sections {', '.join(s.title for s in sections)} re-measured by `{command}` on: {facts}."
    # An earlier partial run's note stays until every section it names has been measured again.
    now = {s.title for s in sections}
    header = [line for line in header if not line.startswith("Sections ") or not _covered(line, order, now)]
    header = header[:-1] + [note, ""] if header and header[-1] == "" else header + [note, ""]
    out = list(header)
    for title in order:
        out += [title, *blocks[title]]
    return "\n".join(out).rstrip("\n") + "\n"


def _covered(note: str, order: list[str], titles: set[str]) -> bool:
    """Whether every page section an earlier "Sections … re-measured" ``note`` names is among ``titles``."""
    named = [title[3:] for title in order if title.startswith("## ") and f"{title[3:]} " in note]
    return bool(named) and set(named) <= titles


if __name__ == "__main__":
    sys.exit(main())
