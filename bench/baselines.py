"""Fair baselines: the engine at its defaults against the loops a careful user writes, and against Lightning.

Every variant is a process of its own (so each gets its own thread settings,
and a neighbour's load hits all alike), on the SensorLM ``demo`` preset, batch
16, the same model, batches, optimizer, clipping and schedule
(bench.baseline_loops), reaching the same loss at the last step:

* **engine, defaults**: ``sensorlm-tui train --headless`` with no thread or
  worker flags (engine.training.threads plans them: on a 2-core box with this
  demo, one torch thread and two data worker processes), events.jsonl,
  console, heartbeat, control server: everything a real run has. Evaluation
  and checkpoints are off mid-run (``--eval-every 0 --checkpoint-every 0``),
  as the loops have none; its step-0 and final evaluation fall outside the
  window;
* **DataLoader loop (1 worker)** and **(2 workers)**: ``DataLoader(
  num_workers=1 or 2)`` and ``torch.optim.AdamW`` as a user writes them, at the
  torch thread count that is fastest for the loop on this machine (tried once
  per count before the rounds, the rates on the page: the setting a careful
  user finds, where torch's default is one thread per core);
* **Lightning (1 worker)** and **(2 workers)** (the ``bench`` extra): the same
  DataLoaders and threads under ``Trainer``;
* extras, in the first ``extra_rounds`` rounds only: **engine, --threads 2**
  (torch's default on 2 cores, for the load comparison), the **inline loop**
  (batches built in the loop: a lower bound, and the measurement of what a
  batch and a step cost here), and the **DataLoader loop + the engine's
  settings** (fused AdamW, the allocator keeping freed memory: how much of
  the engine's lead those two are).

The same window for everyone: steps/s between the ends of steps ``lo`` and
``hi``, read from each variant's own per-step wall times (``time.time()`` once
the step's loss is on the host: the engine's StepLogged ``t``, the loops'
marks), so start-up, the first steps' measuring and warm-up fall outside it
alike. ``lo`` is past the engine's start-up of its worker processes (spawned
at its 6th step, each importing torch: 1-3 s quiet, during which the engine
builds batches itself and its steps run slower: ~3× their steady time over
steps 5-20 of a 100-step run at load 15), which the
loops' forked DataLoader workers do not pay: a window that begins inside it
charges a one-off start-up to a steady rate (at load 9-17 here the engine's
tree used ~345 ms of CPU a step over steps 6-21 while its workers started,
~118 ms from step 21 on). Each run's ``settling`` (CPU a step over the
window's first third ÷ over its last third: the workers' start-up burns CPU,
and unlike wall time it hardly moves with a neighbour's load) shows on the
page whether its window was past start-up. Each variant's process tree is
read from outside the same way (bench.cpu_share.CpuTrace, every ``POLL_S``)
and its CPU between the two step ends interpolated, so cores and steps per
CPU-second cover the same window too.

Rounds interleave the variants (A B C …, then … C B A). After all the quiet
rounds, ``load_rounds`` rounds run the ``LOADED`` variants again beside a
CPU-bound load generator (one busy process the bench starts and stops; last,
so its load does not linger in a quiet block's 1-minute average). The
machine's 1-minute load average is sampled every second through every block
(bench.common.LoadSampler) and printed beside each ratio: a ratio measured
while neighbours ran is not a quiet box's. Goals (performance issue): engine
÷ DataLoader loop ≥ 1.00 and engine ÷ Lightning ≥ 1.05, quiet, against the
faster of each pair of careful variants; loaded, the engine default keeps
≥ 0.9 of its quiet rate.

What load can take is the kernel's to decide, so each run also measures the
CPU its process tree (the variant and its data workers) used in the window:
steps/s = cores used × steps per CPU-second, and loaded ÷ quiet steps/s splits
into the CPU share (cores loaded ÷ quiet: the scheduler's decision, a bound
for any plan that wastes no CPU quietly) times the steps per CPU-second kept
(the plan's part). With autogroup on, every variant and the load generator
start sessions of their own (``setsid``), so CFS splits the CPU between
sessions. The variants are bench.baseline_variants; the page's text is bench.baselines_page.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable

from bench.baseline_loops import window_rate
from bench.baseline_variants import BATCH, ENGINES, EXTRAS, LOADED, LOOPS, PRESET, SIZES, VARIANTS
from bench.baseline_variants import DATALOADER as DATALOADER  # the names other benches read from here
from bench.baseline_variants import ENGINE as ENGINE
from bench.baseline_variants import LIGHTNING as LIGHTNING
from bench.common import ROOT, LoadSampler, Section, smoke, standalone
from bench.cpu_share import POLL_S, CpuTrace, autogroup
from bench.run_events import EventsFile
from engine.run.steps import open_record

TIMEOUT_S = 900.0


def _env(extra: dict[str, str] | None = None) -> dict:
    env = {**os.environ, **(extra or {})}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("NO_COLOR", "1")
    return env


def run_process(argv: list[str], cap_s: float, events: EventsFile | None = None,
                env: dict[str, str] | None = None) -> dict:
    """Run one variant's process, reading its tree's CPU every ``POLL_S`` (and its events, when given):
    {code (None: killed at ``cap_s``), trace, stdout, stderr, wall_s (launch → exit)}."""
    began = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, cwd=ROOT, env=_env(env), stdout=out, stderr=err, text=True,
                                start_new_session=True)
        trace = CpuTrace(proc.pid)
        code = _watch(proc, trace, events, cap_s)
        out.seek(0)
        err.seek(0)
        return {"code": code, "trace": trace, "stdout": out.read(), "stderr": err.read(),
                "wall_s": time.perf_counter() - began}


def _watch(proc: subprocess.Popen, trace: CpuTrace, events: EventsFile | None, cap_s: float) -> int | None:
    """Sample ``proc``'s tree until it exits (its code) or ``cap_s`` passes (None, its session killed). A sample
    taken as it exits is dropped: its workers may already be gone from the tree."""
    deadline = time.monotonic() + cap_s
    try:
        while True:
            if events is not None:
                events.read()
            trace.sample()
            code = proc.poll()
            if code is not None:
                trace.samples.pop()
                return code
            if time.monotonic() >= deadline:
                _kill_session(proc)
                return None
            time.sleep(POLL_S)
    except BaseException:  # interrupted: never leave a variant running
        _kill_session(proc)
        raise


def _kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL the variant's session (it and any data workers) and reap it."""
    with contextlib.suppress(ProcessLookupError):  # all of it already gone
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def loop_run(kind: str, steps: int, threads: int, *flags: str, cap_s: float = TIMEOUT_S) -> dict:
    """One bench.baseline_loops process: {marks, data_s, loss, trace, wall_s, capped, plan}."""
    argv = [sys.executable, "-m", "bench.baseline_loops", kind, "--preset", PRESET, "--steps", str(steps),
            "--batch", str(BATCH), "--threads", str(threads), *flags]
    done = run_process(argv, cap_s)
    if done["code"] is None:
        return {"marks": [], "data_s": [], "loss": float("nan"), "trace": done["trace"], "wall_s": done["wall_s"],
                "capped": 0, "plan": ""}
    if done["code"] != 0:
        raise RuntimeError(f"{kind} loop exited {done['code']}: {done['stderr'][-600:]}")
    out = json.loads(done["stdout"].strip().splitlines()[-1])
    return {**out, "trace": done["trace"], "wall_s": done["wall_s"], "capped": None, "plan": ""}


def engine_run(steps: int, root: Path, flags: tuple[str, ...] = (), cap_s: float = TIMEOUT_S,
               env: dict[str, str] | None = None) -> dict:
    """One headless engine run: {marks (StepLogged ``t`` by step, NaN where none was logged), data_s (empty),
    loss, trace, wall_s, capped (its last step when killed at ``cap_s``), plan (its thread line)}."""
    run_dir = root / f"engine-{uuid.uuid4().hex[:6]}"
    argv = [sys.executable, "-m", "tui.cli", "train", "--headless", "--preset", PRESET, "--max-steps", str(steps),
            "--batch-size", str(BATCH), "--eval-every", "0", "--checkpoint-every", "0", "--set",
            "data.val_samples=16", "--run-dir", str(run_dir), *flags]
    events = EventsFile(run_dir / "events.jsonl")
    done = run_process(argv, cap_s, events, env)
    if done["code"] not in (0, None):
        raise RuntimeError(f"engine exited {done['code']}: {done['stderr'][-600:]}")
    events.read()
    records = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    plan = next((r["text"] for r in reversed(records) if r["type"] == "log" and r.get("stream") == "engine"
                 and r["text"].startswith("threads:")), "")
    logged = dict(events.steps)  # every step's time, from the run's step record
    marks = [logged.get(s, float("nan")) for s in range(1, events.last_step() + 1)]
    last = open_record(run_dir).window("loss", steps, steps)[1]
    loss = float(last[0]) if len(last) else float("nan")
    return {"marks": marks, "data_s": [], "loss": loss, "trace": done["trace"], "wall_s": done["wall_s"],
            "capped": events.last_step() if done["code"] is None else None, "plan": plan}


def window_row(run: dict, window: tuple[int, int]) -> dict:
    """One run's figures over the window's steps: {steps_per_s, cores, steps_per_cpu_s, data_share, build_ms,
    compute_ms, settling, loss, wall_s, plan, capped}. ``settling``: the tree's CPU a step over the window's
    first third ÷ over its last third (≈ 1 when the window is past the run's start-up). A run killed at its cap
    is measured over the steps it reached (a third of them warm-up at most)."""
    marks = run["marks"]
    lo, hi = window
    if run["capped"] is not None:
        last = len(marks)
        lo, hi = min(lo, max(1, last // 3)), min(hi, last)
    rate = window_rate(marks, lo, hi)
    start, end = (marks[lo - 1], marks[hi - 1]) if math.isfinite(rate) else (math.nan, math.nan)
    cores = run["trace"].cores(start, end) if math.isfinite(rate) else math.nan
    data = run["data_s"][lo:hi]  # steps lo+1 … hi: the ones that end inside the window
    steps_s = [b - a for a, b in zip(marks[lo - 1:hi - 1], marks[lo:hi])]
    third = (hi - lo) // 3
    return {"steps_per_s": rate, "cores": cores, "steps_per_cpu_s": rate / cores if cores > 0 else math.nan,
            "data_share": sum(data) / (end - start) if data and math.isfinite(rate) else math.nan,
            "build_ms": 1e3 * statistics.median(data) if data else math.nan,
            "compute_ms": 1e3 * statistics.median([s - d for s, d in zip(steps_s, data)]) if data else math.nan,
            "settling": _cpu_a_step(run, lo, lo + third) / _cpu_a_step(run, hi - third, hi) if third else math.nan,
            "loss": run["loss"], "wall_s": run["wall_s"], "plan": run["plan"], "capped": run["capped"]}


def _cpu_a_step(run: dict, lo: int, hi: int) -> float:
    """The tree's CPU seconds a step between the ends of steps ``lo`` and ``hi`` (NaN where not read)."""
    marks, trace = run["marks"], run["trace"]
    if not 1 <= lo < hi <= len(marks):
        return math.nan
    return (trace.at(marks[hi - 1]) - trace.at(marks[lo - 1])) / (hi - lo)


def loop_rate(kind: str, steps: int, window: tuple[int, int], threads: int, *flags: str) -> dict:
    """One loop process's window figures (bench.compile_bench compares compiled variants with it)."""
    return window_row(loop_run(kind, steps, threads, *flags), window)


def engine_rate(steps: int, window: tuple[int, int], root: Path, flags: tuple[str, ...] = (),
                cap_s: float = TIMEOUT_S, env: dict[str, str] | None = None) -> dict:
    """One engine run's window figures (bench.allocator and bench.compile_bench compare engine variants)."""
    return window_row(engine_run(steps, root, flags, cap_s, env), window)


class Load:
    """A CPU-bound neighbour: one busy Python process for as long as the block lasts."""

    def __enter__(self) -> "Load":
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        return self

    def __exit__(self, *exc) -> None:
        self.proc.kill()
        self.proc.wait(10)


def best_threads(steps: int, window: tuple[int, int], cores: int) -> tuple[int, dict[int, float]]:
    """The DataLoader loop's fastest torch thread count here (one run per count)."""
    tried = {n: loop_rate("dataloader", steps, window, n)["steps_per_s"] for n in range(1, max(1, cores) + 1)}
    return max(tried, key=lambda n: tried[n] if math.isfinite(tried[n]) else -1.0), tried


def measure(steps: int, window: tuple[int, int], rounds: int, with_load: bool = True,
            variants: tuple[str, ...] = VARIANTS, cap_s: float = TIMEOUT_S,
            on_round: Callable[[dict], None] | None = None, load_rounds: int | None = None,
            extra_rounds: int | None = None, threads: int | None = None) -> dict:
    """``variants`` in ``rounds`` interleaved rounds (``EXTRAS`` only in the first ``extra_rounds``), then the
    ``LOADED`` ones in ``load_rounds`` interleaved rounds beside the load generator (both default: ``rounds``):
    {variant: {"quiet": [steps/s ..], "load": [..], "cores": {"quiet": [..], "load": [..]}, "steps_per_cpu_s": {..},
    "rows": {"quiet": [window_row ..], "load": [..]}}, "_load": {"quiet": [[load averages] per round], "load": ..},
    …} (NaN: not read).

    ``on_round(results)``: called after each round (quiet or loaded) with the results so far (bench.gpu_probe
    prints them, so a run cut at its limit keeps its finished rounds); ``threads``: the loops' torch threads (None:
    the fastest here, tried first)."""
    from engine.training.threads import usable_cores

    load_rounds = rounds if load_rounds is None else load_rounds
    extra_rounds = rounds if extra_rounds is None else extra_rounds
    cores = usable_cores().usable
    threads, tried = best_threads(steps, window, cores) if threads is None else (threads, {})
    results: dict = {name: {"quiet": [], "load": [], "cores": {"quiet": [], "load": []},  # the ones not run stay empty
                            "steps_per_cpu_s": {"quiet": [], "load": []}, "rows": {"quiet": [], "load": []}}
                     for name in VARIANTS}
    results.update({"_threads": threads, "_tried": tried, "_plans": [], "_loss": {}, "_capped": [],
                    "_autogroup": autogroup(), "_cores": cores, "_load": {"quiet": [], "load": []},
                    "_rounds": {"rounds": rounds, "load": load_rounds if with_load else 0, "extra": extra_rounds}})
    with tempfile.TemporaryDirectory(prefix="bench-baselines-") as tmp, LoadSampler(1.0) as sampler:
        root = Path(tmp)

        def timed(name: str, condition: str, index: int) -> dict:
            raw = (engine_run(steps, root, ENGINES[name], cap_s) if name in ENGINES else
                   loop_run(LOOPS[name][0], steps, threads, *LOOPS[name][1], cap_s=cap_s))
            row = window_row(raw, window)
            capped = f", killed at the {cap_s:g} s cap at step {row['capped']}" if row["capped"] is not None else ""
            print(f"   round {index + 1} {condition:5} {name}: {row['steps_per_s']:.2f} steps/s, "
                  f"{row['cores']:.2f} cores, {row['steps_per_cpu_s']:.2f} steps per CPU-s, loss {row['loss']:.4f} "
                  f"({row['wall_s']:.0f} s launch → exit{capped})", flush=True)
            if row["capped"] is not None:
                results["_capped"].append(f"{condition}, {name}: killed after {cap_s:g} s at step {row['capped']}")
            return row

        blocks = []
        for index in range(rounds):
            names = [n for n in variants if n not in EXTRAS or index < extra_rounds]
            blocks.append(("quiet", index, names if index % 2 == 0 else names[::-1]))
        for index in range(load_rounds if with_load else 0):  # after every quiet round: no neighbour's load decays
            names = [n for n in variants if n in LOADED]  # into a quiet block's load average
            blocks.append(("load", index, names if index % 2 == 0 else names[::-1]))
        for condition, index, block in blocks:
            sampler.mark(f"{condition} {index}")
            with Load() if condition == "load" else contextlib.nullcontext():
                rows = {name: timed(name, condition, index) for name in block}
            results["_load"][condition].append(sampler.values(f"{condition} {index}"))
            _record(results, condition, rows)
            if on_round is not None:
                on_round(results)
    return results


def _record(results: dict, condition: str, rows: dict[str, dict]) -> None:
    """File one block's rows under their variants (the loss and the plan line kept once per variant/condition)."""
    for name, row in rows.items():
        results[name][condition].append(row["steps_per_s"])
        for key in ("cores", "steps_per_cpu_s"):
            results[name][key][condition].append(row[key])
        results[name]["rows"][condition].append({k: v for k, v in row.items() if k != "plan"})
        results["_loss"].setdefault(name, []).append(row["loss"])
        if row["plan"]:
            results["_plans"].append(f"{condition}, {name}: {row['plan']}")


def run(quick: bool = False) -> Section:
    """Suite entry: ``SIZES`` full (5 quiet rounds, the extras in the first 3, then 3 loaded rounds), quick (3 quiet
    rounds, the extras in the first, 1 loaded) or smoke (8 steps, one quiet round)."""
    from bench.baselines_page import section

    steps, window, rounds, load_rounds, extra_rounds, cap_s = SIZES["smoke" if smoke() else "quick" if quick
                                                                    else "full"]
    results = measure(steps, window, rounds, with_load=load_rounds > 0, cap_s=cap_s, load_rounds=load_rounds,
                      extra_rounds=extra_rounds)
    return section(results, steps, window, quick)


if __name__ == "__main__":
    standalone(run, __doc__)
