"""Fair baselines: the engine at its defaults against the loop a careful user writes, and against Lightning.

Every variant is a process of its own (so each gets its own thread settings,
and a neighbour's load hits all alike), on the SensorLM ``demo`` preset, batch
16, the same model, batches, optimizer, clipping and schedule
(bench.baseline_loops), steps/s between steps ``lo`` and ``hi``:

* **DataLoader loop**: ``DataLoader(num_workers=1)``, at the torch thread
  count that is fastest for it on this machine (tried once per thread count
  before the rounds), and ``torch.optim.AdamW`` as a user writes it;
* **Lightning** (the ``bench`` extra): same DataLoader, same threads;
* **engine, defaults**: ``sensorlm-tui train --headless`` with no thread or
  worker flags (engine.training.threads plans them), events.jsonl, console, heartbeat,
  control server — everything a real run has;
* **engine, --threads 2**: a fixed two-thread setting (torch's default on a
  2-core box), for the load comparison;
* **inline loop**: batches built in the loop (the old headline): a lower bound;
* **DataLoader loop + the engine's settings**: the same loop with the two
  process settings the engine makes (fused AdamW, the allocator keeping freed
  memory): how much of the engine's lead is those two (quiet only);
* **DataLoader loop, 2 workers**: ``num_workers=2``, what a user who tunes the
  loader by hand gets; the engine's plan picks two workers on a data-bound
  2-core box (engine.training.threads), so this row shows how much of its lead is that
  choice (quiet only).

Rounds interleave the variants (A B C …, then … C B A); each round runs them
quiet, then again with a CPU-bound load generator (one busy process the bench
starts and stops) beside them. Goals (performance issue): engine ÷ DataLoader
loop ≥ 1.00 and engine ÷ Lightning ≥ 1.05, quiet; loaded, the engine default
keeps ≥ 0.9 of its quiet rate.

What load can take is the kernel's to decide, so each run also measures the
CPU its process tree (the variant and its data worker) used in the window
(bench.cpu_share): steps/s = cores used × steps per CPU-second, and loaded ÷
quiet steps/s splits into the CPU share (cores loaded ÷ quiet: the scheduler's
decision, a bound for any plan that wastes no CPU quietly) times the steps per
CPU-second kept (the plan's part: ≈ 1 when it wastes no CPU; threads spinning at
barriers for cores they are not given push it down). With autogroup on, every
variant and the load generator start sessions of their own (``setsid``), so
CFS splits the CPU between sessions: a variant that keeps both cores of a
2-core box busy quietly gets about one beside the neighbour, ~0.5 of its
quiet rate at best. The loops read their tree's CPU when steps ``lo`` and
``hi`` finish; the engine is polled from here every ``POLL_S`` (events.jsonl,
~50 µs; its tree's CPU only at the first poll past ``lo`` and past ``hi``).
The engine flushes events about once a second, so its CPU window can sit up
to ~1 s after the steps' window; its steps per CPU-second is therefore its
steps/s (from the events' own times) ÷ its cores (CPU rate over the polled
window), which a steady run makes the same number as Δsteps ÷ ΔCPU without
that offset's error. For the loops the two are the same by construction.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable

from bench.common import ROOT, Section, fmt_stats, ratios, smoke, standalone, stats, verdict
from bench.cpu_share import AUTOGROUP, autogroup, tree_cpu_s
from bench.run_events import EventsFile, steps_per_s

PRESET, BATCH = "demo", 16
DATALOADER, LIGHTNING, ENGINE, ENGINE_T2, INLINE, DATALOADER_ENGINE = (
    "DataLoader loop (1 worker)", "Lightning", "engine, defaults", "engine, --threads 2", "inline loop (lower bound)",
    "DataLoader loop + the engine's fused AdamW and allocator settings")
DATALOADER_2 = "DataLoader loop, 2 workers (tuned by hand)"
VARIANTS = (ENGINE, DATALOADER, LIGHTNING, ENGINE_T2, INLINE, DATALOADER_ENGINE, DATALOADER_2)
#: The variants run again beside the load generator (the inline lower bound says nothing more there).
LOADED = (ENGINE, DATALOADER, LIGHTNING, ENGINE_T2)
TIMEOUT_S = 900.0
#: How often the bench reads a running engine's events.jsonl (each read ~50 µs of the bench's CPU).
POLL_S = 0.1


def _env(extra: dict[str, str] | None = None) -> dict:
    env = {**os.environ, **(extra or {})}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("NO_COLOR", "1")
    return env


def loop_rate(kind: str, steps: int, window: tuple[int, int], threads: int, *flags: str) -> dict:
    """One bench.baseline_loops process: {steps_per_s, cores, steps_per_cpu_s, loss}."""
    out = subprocess.run([sys.executable, "-m", "bench.baseline_loops", kind, "--preset", PRESET, "--steps",
                          str(steps), "--batch", str(BATCH), "--threads", str(threads), "--window", *map(str, window),
                          *flags],
                         cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S,
                         start_new_session=True)
    if out.returncode != 0:
        raise RuntimeError(f"{kind} loop exited {out.returncode}: {out.stderr[-600:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def engine_rate(steps: int, window: tuple[int, int], root: Path, flags: tuple[str, ...] = (),
                cap_s: float = TIMEOUT_S, env: dict[str, str] | None = None) -> dict:
    """One headless engine run: {steps_per_s, cores, steps_per_cpu_s, loss, plan, capped} (plan: its thread line);
    ``env``: variables added to its environment.

    A run still going after ``cap_s`` (a thread setting that collapses under load: 10× slower) is killed
    and measured over the steps it reached (``capped``: its last step), so one variant cannot eat the bench.
    """
    run_dir = root / f"engine-{uuid.uuid4().hex[:6]}"
    argv = [sys.executable, "-m", "tui.cli", "train", "--headless", "--preset", PRESET, "--max-steps", str(steps),
            "--batch-size", str(BATCH), "--eval-every", "0", "--checkpoint-every", "0", "--set",
            "data.val_samples=16", "--run-dir", str(run_dir), *flags]
    events = EventsFile(run_dir / "events.jsonl")
    with open(os.devnull, "w") as devnull, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, cwd=ROOT, env=_env(env), stdout=devnull, stderr=err, text=True,
                                start_new_session=True)
        code, samples = _watch(proc, events, window, cap_s)
        err.seek(0)
        if code not in (0, None):
            raise RuntimeError(f"engine exited {code}: {err.read()[-600:]}")
    events.read()
    records = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    plan = next((r["text"] for r in reversed(records) if r["type"] == "log" and r.get("stream") == "engine"), "")
    loss = next((r["loss"] for r in reversed(records) if r["type"] == "step"), float("nan"))
    lo, hi = window
    if code is None:  # killed at the cap: the window it reached (a third of it warm-up at most)
        last = events.last_step()
        lo, hi = min(lo, max(1, last // 3)), min(hi, last)
    rate = steps_per_s(events.steps, lo, hi) if hi > lo else float("nan")
    cores = _cores(samples.get("lo"), samples.get("hi") or samples.get("end"))
    return {"steps_per_s": rate, "cores": cores, "steps_per_cpu_s": rate / cores if cores > 0 else float("nan"),
            "loss": loss, "plan": plan, "capped": events.last_step() if code is None else None}


def _watch(proc: subprocess.Popen, events: EventsFile, window: tuple[int, int],
           cap_s: float) -> tuple[int | None, dict]:
    """Wait for the engine (killing its session at ``cap_s``): (exit code, or None when killed; its CPU samples).

    A sample is (wall, tree CPU seconds), taken at the first poll whose newest logged step reaches the window's
    ``lo``, and its ``hi``; ``end`` is the last poll before a kill. One taken as the engine exits is dropped: its
    worker may already be gone from the tree.
    """
    samples: dict[str, tuple[float, float]] = {}
    deadline = time.monotonic() + cap_s
    try:
        while True:
            events.read()
            due = [key for key, target in zip(("lo", "hi"), window)
                   if key not in samples and events.last_step() >= target]
            if due:  # one reading for both ends when one flush crossed both: no window, no number
                sample = (time.perf_counter(), tree_cpu_s(proc.pid))
                if proc.poll() is None:
                    samples.update(dict.fromkeys(due, sample))
            code = proc.poll()
            if code is not None:
                return code, samples
            if time.monotonic() >= deadline:
                samples["end"] = (time.perf_counter(), tree_cpu_s(proc.pid))
                _kill_session(proc)
                return None, samples
            time.sleep(POLL_S)
    except BaseException:  # interrupted: never leave an engine running
        _kill_session(proc)
        raise


def _kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL the engine's session (the engine and any data workers) and reap the engine."""
    with contextlib.suppress(ProcessLookupError):  # all of it already gone
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def _cores(start: tuple[float, float] | None, end: tuple[float, float] | None) -> float:
    """CPU seconds per wall second between two (wall, CPU seconds) samples; NaN without both."""
    if start is None or end is None or end[0] <= start[0]:
        return float("nan")
    return (end[1] - start[1]) / (end[0] - start[0])


class Load:
    """A CPU-bound neighbour: one busy Python process for as long as the block lasts."""

    def __enter__(self) -> "Load":
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        return self

    def __exit__(self, *exc) -> None:
        self.proc.kill()
        self.proc.wait(10)


def best_threads(steps: int, window: tuple[int, int], cores: int) -> tuple[int, dict[int, float]]:
    """The DataLoader loop's fastest torch thread count here (one short run per count)."""
    tried = {n: loop_rate("dataloader", steps, window, n)["steps_per_s"] for n in range(1, max(1, cores) + 1)}
    return max(tried, key=tried.get), tried


def measure(steps: int, window: tuple[int, int], rounds: int, with_load: bool = True,
            variants: tuple[str, ...] = VARIANTS, cap_s: float = TIMEOUT_S,
            on_round: Callable[[dict], None] | None = None) -> dict:
    """``variants``, quiet and loaded, ``rounds`` interleaved rounds: {variant: {"quiet": [steps/s ..], "load": [..],
    "cores": {"quiet": [..], "load": [..]}, "steps_per_cpu_s": {"quiet": [..], "load": [..]}}} (NaN: not read).

    ``on_round(results)``: called after each round with the results so far (bench.gpu_probe prints them, so a
    run cut at its limit keeps its finished rounds)."""
    from engine.training.threads import usable_cores

    cores = usable_cores().usable
    threads, tried = best_threads(max(window[1] + 5, steps // 2), (window[0] // 2 or 1, window[1] // 2), cores)
    results: dict = {name: {"quiet": [], "load": [], "cores": {"quiet": [], "load": []},  # the ones not run stay empty
                            "steps_per_cpu_s": {"quiet": [], "load": []}} for name in VARIANTS}
    results["_threads"], results["_tried"], results["_plans"], results["_loss"] = threads, tried, [], {}
    results["_capped"], results["_autogroup"], results["_cores"] = [], autogroup(), cores
    with tempfile.TemporaryDirectory(prefix="bench-baselines-") as tmp:
        root = Path(tmp)
        run = {DATALOADER: lambda: loop_rate("dataloader", steps, window, threads),
               LIGHTNING: lambda: loop_rate("lightning", steps, window, threads),
               INLINE: lambda: loop_rate("inline", steps, window, threads),
               DATALOADER_ENGINE: lambda: loop_rate("dataloader", steps, window, threads, "--engine-settings"),
               DATALOADER_2: lambda: loop_rate("dataloader", steps, window, threads, "--workers", "2"),
               ENGINE: lambda: engine_rate(steps, window, root, cap_s=cap_s),
               ENGINE_T2: lambda: engine_rate(steps, window, root, ("--threads", "2"), cap_s=cap_s)}

        def timed(name: str, condition: str) -> dict:
            began = time.perf_counter()
            row = run[name]()
            took = time.perf_counter() - began
            capped = f", killed at the {cap_s:g} s cap at step {row['capped']}" if row.get("capped") else ""
            print(f"   round {index + 1}/{rounds} {condition:5} {name}: {row['steps_per_s']:.2f} steps/s, "
                  f"{row['cores']:.2f} cores, {row['steps_per_cpu_s']:.2f} steps per CPU-s ({took:.0f} s{capped})",
                  flush=True)
            if row.get("capped"):
                results["_capped"].append(f"{condition}, {name}: killed after {cap_s:g} s at step {row['capped']}")
            return row
        for index in range(rounds):
            order = list(variants) if index % 2 == 0 else list(reversed(variants))
            loaded = [name for name in reversed(order) if name in LOADED]
            blocks = [("quiet", order)] + ([("load", loaded)] if with_load else [])
            for condition, names in blocks:
                if condition == "load":
                    with Load():
                        rows = {name: timed(name, condition) for name in names}
                else:
                    rows = {name: timed(name, condition) for name in names}
                for name, row in rows.items():
                    results[name][condition].append(row["steps_per_s"])
                    for key in ("cores", "steps_per_cpu_s"):
                        results[name][key][condition].append(row[key])
                    results["_loss"].setdefault(name, row["loss"])
                    if row.get("plan"):
                        results["_plans"].append(f"{condition}, {name}: {row['plan']}")
            if on_round is not None:
                on_round(results)
    return results


def run(quick: bool = False) -> Section:
    """Suite entry: full 100 steps (window 20-80) × 5 rounds, quiet and loaded, an engine run capped at 60 s;
    quick 40 steps (10-35) × 3, capped at 35 s (~6 min on 2 quiet cores)."""
    if smoke():
        steps, window, rounds, cap_s = 8, (3, 7), 1, TIMEOUT_S
    elif quick:
        steps, window, rounds, cap_s = 40, (10, 35), 3, 35.0
    else:  # 5 rounds: on a shared VM one variant's rate moves 10-20 % from run to run
        steps, window, rounds, cap_s = 100, (20, 80), 5, 60.0
    return section(measure(steps, window, rounds, with_load=not smoke(), cap_s=cap_s), steps, window, rounds, quick)


#: Why a goal can be missed, as measured (printed with the verdict when it is).
WHY_MISSED = {
    "dataloader": "on 2 cores the SensorLM demo is data-bound: a batch builds in about the time a step takes (both "
                  "~52 ms alone, ~70-90 ms side by side), so the workers' pace sets every variant's rate; the engine's "
                  "second worker (which the loop does not have) and what it saves on the trainer's side (fused AdamW, "
                  "fewer page faults) are of the order of the run-to-run spread of this VM (10-40 %)",
    "lightning": "Lightning and the engine wait on worker pace (the demo is data-bound on 2 cores); the engine's lead "
                 "is its second worker plus Lightning's per-step overhead, inside this VM's run-to-run spread",
    "efficiency": "each CPU-second under load bought fewer steps than quiet: CPU went to threads that waited or "
                  "spun for cores the neighbour held",
}
#: What the kernel's autogroup setting means for a neighbour's load (the table's preamble).
AUTOGROUP_MEANS = {
    "on": "CFS shares the CPU between sessions, not threads, and every variant and the load generator start a "
          "session of their own, so beside one busy neighbour a variant is sure of only half the box whatever its "
          "thread plan (the neighbour's session gets the other half while it can use it): on 2 cores, one that keeps "
          "both busy quietly can keep ~0.5 of its quiet rate at best",
    "off": "CFS shares the CPU between threads, so a variant with more busy threads than the neighbour takes more "
           "of it",
    "unknown": "whether CFS shares the CPU between sessions or between threads is not known here",
}


def section(results: dict, steps: int, window: tuple[int, int], rounds: int, quick: bool) -> Section:
    """The page section from measured (or, in the smoke test, given) results."""
    shown = [name for name in VARIANTS if results.get(name, {}).get("quiet")]  # the variants that ran
    quiet = {name: results[name]["quiet"] for name in shown}
    load = {name: results[name]["load"] for name in shown}
    base = quiet[DATALOADER]
    lines = [f"SensorLM `{PRESET}` preset, batch {BATCH}, {steps} steps a run, steps/s between steps {window[0]} and "
             f"{window[1]}, {rounds} interleaved round(s), each variant a process of its own. The DataLoader loop and "
             f"Lightning run at {results['_threads']} torch thread(s), the fastest for the DataLoader loop here "
             f"(tried: " + ", ".join(f"{n}: {r:.2f} steps/s" for n, r in sorted(results["_tried"].items())) + ").", "",
             "| variant | steps/s quiet | ÷ DataLoader loop | steps/s with a CPU-bound neighbour | loaded ÷ quiet | "
             "loss at the end |", "|---|---:|---:|---:|---:|---:|"]
    for name in shown:
        r = ratios(quiet[name], base)
        kept = ratios(load[name], quiet[name])
        lines.append(f"| {name} | {fmt_stats(quiet[name], '.2f')} | "
                     f"{'1' if name == DATALOADER else ('**' + fmt_stats(r) + '**')} | "
                     f"{fmt_stats(load[name], '.2f') if load[name] else '—'} | "
                     f"{fmt_stats(kept) if kept else '—'} | {results['_loss'].get(name, float('nan')):.4f} |")
    engine_dl = stats(ratios(quiet[ENGINE], base))[1]
    engine_l = stats(ratios(quiet[ENGINE], quiet[LIGHTNING]))[1]
    lines += ["", f"Engine ÷ Lightning (quiet): **{fmt_stats(ratios(quiet[ENGINE], quiet[LIGHTNING]))}**."]
    if load[ENGINE]:
        lines.append("Loaded ratios (engine ÷ DataLoader loop with the neighbour): "
                     f"**{fmt_stats(ratios(load[ENGINE], load[DATALOADER]))}**; engine ÷ Lightning: "
                     f"**{fmt_stats(ratios(load[ENGINE], load[LIGHTNING]))}**.")
    if any(_finite(results[name].get("cores", {}).get("quiet", [])) for name in shown):
        lines += ["", *_cpu_lines(results)]
    if results.get("_capped"):
        lines += ["", "Runs killed at the time cap (measured over the steps they reached): "
                  + "; ".join(results["_capped"]) + "."]
    if results["_plans"]:
        lines += ["", "The engine's thread plans (its log line):", ""] + [f"- {p}" for p in sorted(set(
            results["_plans"]))]
    verdicts = [_why(verdict("engine default ÷ DataLoader loop steps/s (quiet)", engine_dl, 1.0), "dataloader"),
                _why(verdict("engine default ÷ Lightning steps/s (quiet)", engine_l, 1.05), "lightning")]
    if load[ENGINE]:
        kept = verdict("engine default: loaded ÷ quiet steps/s", stats(ratios(load[ENGINE], quiet[ENGINE]))[1], 0.9)
        verdicts.append(f"{kept} — why: {_share_reason(results)}" if "MISSED" in kept else kept)
        verdicts.append(f"engine --threads 2: loaded ÷ quiet steps/s: "
                        f"{stats(ratios(load[ENGINE_T2], quiet[ENGINE_T2]))[1]:.3g} (the fixed setting, for contrast)")
        efficiency = _median(_kept(results, ENGINE, "steps_per_cpu_s"))
        if math.isfinite(efficiency):
            verdicts.append(_why(verdict("engine default: steps per CPU-second, loaded ÷ quiet", efficiency, 0.9),
                                 "efficiency"))
            verdicts.append(f"engine --threads 2: steps per CPU-second, loaded ÷ quiet: "
                            f"{_median(_kept(results, ENGINE_T2, 'steps_per_cpu_s')):.3g} (the fixed setting, for "
                            f"contrast)")
    return Section("Fair baselines: engine vs a careful DataLoader loop and Lightning",
                   f"python -m bench --only baselines{' --quick' if quick else ''}", "\n".join(lines), verdicts)


def _cpu_lines(results: dict) -> list[str]:
    """The CPU table: cores each variant's processes used, the share load left them, steps per CPU-second kept."""
    group = results.get("_autogroup", "unknown")
    cores = results.get("_cores")
    lines = [f"Where loaded ÷ quiet goes: steps/s = cores used × steps per CPU-second (CPU time of the variant's "
             f"process tree in the window), so loaded ÷ quiet steps/s = the CPU share load left it × the steps per "
             f"CPU-second it kept. The share is the kernel's decision and bounds loaded ÷ quiet for any plan that "
             f"wastes no CPU quietly; the plan's part is the second factor, ≈ 1 when it wastes no CPU. Autogroup is "
             f"**{group}** here (`{AUTOGROUP}`){f' on {cores} usable cores' if cores else ''}: "
             f"{AUTOGROUP_MEANS[group]}.", "",
             "| variant | cores used quiet / loaded | CPU share loaded ÷ quiet (the bound) | steps per CPU-second "
             "quiet | steps per CPU-second loaded ÷ quiet |", "|---|---:|---:|---:|---:|"]
    for name in VARIANTS:
        if name not in results:
            continue
        cpu = results[name].get("cores", {})
        per_cpu = results[name].get("steps_per_cpu_s", {})
        if not _finite(cpu.get("quiet", [])):
            continue
        lines.append(f"| {name} | {_cell(cpu['quiet'], '.2f')} / {_cell(cpu.get('load', []), '.2f')} | "
                     f"{_cell(_kept(results, name, 'cores'))} | {_cell(per_cpu.get('quiet', []), '.2f')} | "
                     f"{_cell(_kept(results, name, 'steps_per_cpu_s'))} |")
    return lines


def _share_reason(results: dict) -> str:
    """Why the engine default kept less than 0.9 of its quiet steps/s under load, from its measured CPU."""
    cpu = results[ENGINE].get("cores", {})
    share = _median(_kept(results, ENGINE, "cores"))
    efficiency = _median(_kept(results, ENGINE, "steps_per_cpu_s"))
    if not math.isfinite(share):
        return "its CPU use was not measured, so the kernel's share cannot be told from the plan's waste"
    if share >= 0.9:
        return (f"not the kernel's share (its processes kept {share:.2f} of their quiet CPU): each CPU-second bought "
                f"{efficiency:.2f} of its quiet steps")
    return (f"the kernel's share: beside the neighbour the engine's processes got {share:.2f} of the CPU they used "
            f"quiet ({_median(cpu['quiet']):.2f} → {_median(cpu.get('load', [])):.2f} cores; autogroup "
            f"{results.get('_autogroup', 'unknown')}), which bounds loaded ÷ quiet steps/s for any plan that wastes "
            f"no CPU quietly; per CPU-second it kept {efficiency:.2f} of its quiet steps")


def _kept(results: dict, name: str, key: str) -> list[float]:
    """Round-by-round loaded ÷ quiet of a variant's ``key`` ("cores", "steps_per_cpu_s"), rounds without a reading
    left out."""
    series = results[name].get(key, {})
    return [a / b for a, b in zip(series.get("load", []), series.get("quiet", []))
            if math.isfinite(a) and math.isfinite(b) and b]


def _finite(values: list[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


def _median(values: list[float]) -> float:
    finite = _finite(values)
    return stats(finite)[1] if finite else float("nan")


def _cell(values: list[float], spec: str = ".3f") -> str:
    finite = _finite(values)
    return fmt_stats(finite, spec) if finite else "—"


def _why(line: str, key: str) -> str:
    return f"{line} — why: {WHY_MISSED[key]}" if "MISSED" in line else line


if __name__ == "__main__":
    standalone(run, __doc__)
