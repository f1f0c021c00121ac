"""The order bench.long_runs measures in, one run on disk at a time: each size (write, open finished, open
live, delete), the old run (write, convert, open, delete), the many-names runs, the soak, the fast steps.
Each phase is marked on the load sampler, so the page gives the load beside each row.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from bench.common import LoadSampler
from bench.long_runs import generate, probes

#: Bytes a step of each kind of run takes on disk, with room (the disk check before anything is written).
RECORD_RUN_B = 80
OLD_RUN_B = 300
LIVE_RUN_B = 420


def check_disk(plan, scratch: Path) -> None:
    """Refuse to start (one line) when the runs would not fit beside what the disk holds: they are written one
    at a time, so the largest of them, plus the old run, plus the soak, plus 2 GB (of the parts measured)."""
    need = (max(plan.sizes, default=0) * RECORD_RUN_B if "sizes" in plan.parts else 0) + (2 << 30) + \
        (plan.old * OLD_RUN_B if "old" in plan.parts else 0) + (plan.soak * LIVE_RUN_B if "soak" in plan.parts else 0)
    free = shutil.disk_usage(scratch).free
    if free < need:
        raise RuntimeError(f"{scratch}: {free / 1e9:.1f} GB free, the long runs need {need / 1e9:.1f} GB "
                           "(--dir elsewhere, or smaller --sizes)")


def measure_all(plan, scratch: Path, load: LoadSampler) -> dict:
    """Every measurement of the plan's parts (bench.long_runs), in order; the runs are deleted as they are done
    unless ``plan.keep``."""
    check_disk(plan, scratch)
    out: dict = {"reads_record": probes.reads_record(), "zoom": probes.zoom_keys() is not None, "sizes": {},
                 "names": {}}

    def phase(mark: str, what: str, measure, *args):
        load.mark(mark)
        print(f"long_runs: {what} ...", flush=True)
        start = time.perf_counter()
        result = measure(*args)
        print(f"long_runs: {what} took {time.perf_counter() - start:.0f} s ({load.summary(mark)})", flush=True)
        return result

    for steps in plan.sizes if "sizes" in plan.parts else ():
        out["sizes"][steps] = phase(f"size {steps}", f"{steps:,} steps", size_phase, plan, scratch / f"run-{steps}",
                                    steps)
    if "old" in plan.parts:
        out["old"] = phase("old", f"an old run of {plan.old:,} steps", old_phase, plan, scratch / f"old-{plan.old}",
                           plan.old)
    for names in plan.names if "names" in plan.parts else ():
        out["names"][names] = phase(f"names {names}", f"{names:,} metric names", names_phase, plan,
                                    scratch / f"names-{names}", names)
    if "soak" in plan.parts:
        out["soak"] = phase("soak", f"a live soak of {plan.soak:,} steps", soak_phase, plan, scratch / "soak")
    if plan.fast is not None and "fast" in plan.parts:
        out["fast"] = phase("fast", "fast steps", fast_phase, *plan.fast)
    load.mark("end")
    return out


def _drop(plan, run: Path) -> None:
    if not plan.keep:
        shutil.rmtree(run, ignore_errors=True)


def size_phase(plan, run: Path, steps: int) -> dict:
    """A finished run of ``steps``: write it, open it (then the record reads of a frame), follow it live."""
    start = time.perf_counter()
    generate.write_record_run(run, steps)
    out = {"write_s": time.perf_counter() - start, "record_b": generate.disk_bytes(run / "steps"),
           "events_b": (run / "events.jsonl").stat().st_size, "dir_b": generate.disk_bytes(run)}
    out["finished"] = probes.open_finished(run, steps, plan.repeat, plan.hold_s, plan.rss_cap_mib, plan.timeout_s,
                                            plan.keys, plan.warm, run.parent)
    out["cached_b"] = probes.cached_bytes(run)
    out["reads"] = probes.envelope_reads(run, 20, seed=steps)
    out["live"] = {**probes.open_live(run, plan.rate, plan.rss_cap_mib, plan.timeout_s, seconds=plan.live_s),
                   "asked_rate": plan.rate}
    _drop(plan, run)
    return out


def old_phase(plan, run: Path, steps: int) -> dict:
    """A run from before the record: write it, convert it in a fresh process, open it in the viewer."""
    generate.write_old_run(run, steps)
    out = {"steps": steps, "log_b": (run / "events.jsonl").stat().st_size, "direct": probes.convert_direct(run)}
    out["viewer"] = probes.open_old(run, steps, plan.hold_s, plan.rss_cap_mib, plan.timeout_s)
    _drop(plan, run)
    return out


def names_phase(plan, run: Path, names: int) -> dict:
    """A plain loop's run logging ``names`` metrics each step, opened (the run was just written: in cache)."""
    generate.write_names_run(run, names)
    out = {"log_b": (run / "events.jsonl").stat().st_size, "dir_b": generate.disk_bytes(run),
           "open": probes.open_finished(run, generate.NAMES_STEPS, plan.repeat, plan.hold_s, plan.rss_cap_mib,
                                         plan.timeout_s, 0, False, run.parent)}
    _drop(plan, run)
    return out


def soak_phase(plan, run: Path) -> dict:
    """A viewer on a new run, followed from its first frame while the writer appends ``plan.soak`` steps."""
    out = {**probes.open_live(run, plan.rate, plan.rss_cap_mib, plan.timeout_s, steps=plan.soak), "asked": plan.soak,
           "asked_rate": plan.rate}
    _drop(plan, run)
    return out


def fast_phase(steps: int, rounds: int) -> dict:
    """bench.engine_overhead_fast's bare loop and engine, interleaved (its toy rows only): engine ÷ bare a round."""
    from bench import engine_overhead_fast
    from bench.common import ratios

    results = engine_overhead_fast.measure(steps, rounds)
    rate = {name: [row["steps_per_s"] for row in results[name]] for name in ("bare", "engine")}
    return {"ratios": ratios(rate["engine"], rate["bare"]), "bare": rate["bare"], "steps": steps, "rounds": rounds}
