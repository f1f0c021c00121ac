"""Fair baselines: the engine at its defaults against the loop a careful user writes, and against Lightning.

Every variant is a process of its own (so each gets its own thread settings,
and a neighbour's load hits all alike), on the SensorLM ``demo`` preset, batch
16, the same model, batches, optimizer, clipping and schedule
(bench.baseline_loops), steps/s between steps ``lo`` and ``hi``:

* **DataLoader loop**: ``DataLoader(num_workers=1)``, at the torch thread
  count that is fastest for it on this machine (tried once per thread count
  before the rounds);
* **Lightning** (the ``bench`` extra): same DataLoader, same threads;
* **engine, defaults**: ``sensorlm-tui train --headless`` with no thread or
  worker flags (engine.threads plans them), events.jsonl, console, heartbeat,
  control server — everything a real run has;
* **engine, --threads 2**: a fixed two-thread setting (torch's default on a
  2-core box), for the load comparison;
* **inline loop**: batches built in the loop (the old headline): a lower bound.

Rounds interleave the variants (A B C …, then … C B A); each round runs them
quiet, then again with a CPU-bound load generator (one busy process the bench
starts and stops) beside them. Goals (performance issue): engine ÷ DataLoader
loop ≥ 1.00 and engine ÷ Lightning ≥ 1.05, quiet; loaded, the engine default
keeps ≥ 0.9 of its quiet rate.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.common import ROOT, Section, fmt_stats, ratios, smoke, standalone, stats, verdict
from bench.run_events import EventsFile, steps_per_s

PRESET, BATCH = "demo", 16
DATALOADER, LIGHTNING, ENGINE, ENGINE_T2, INLINE = (
    "DataLoader loop (1 worker)", "Lightning", "engine, defaults", "engine, --threads 2", "inline loop (lower bound)")
VARIANTS = (ENGINE, DATALOADER, LIGHTNING, ENGINE_T2, INLINE)
#: The variants run again beside the load generator (the inline lower bound says nothing more there).
LOADED = (ENGINE, DATALOADER, LIGHTNING, ENGINE_T2)
TIMEOUT_S = 900.0


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("NO_COLOR", "1")
    return env


def loop_rate(kind: str, steps: int, window: tuple[int, int], threads: int) -> dict:
    """One bench.baseline_loops process: {steps_per_s, loss}."""
    out = subprocess.run([sys.executable, "-m", "bench.baseline_loops", kind, "--preset", PRESET, "--steps",
                          str(steps), "--batch", str(BATCH), "--threads", str(threads), "--window", *map(str, window)],
                         cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S,
                         start_new_session=True)
    if out.returncode != 0:
        raise RuntimeError(f"{kind} loop exited {out.returncode}: {out.stderr[-600:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def engine_rate(steps: int, window: tuple[int, int], root: Path, flags: tuple[str, ...] = (),
                cap_s: float = TIMEOUT_S) -> dict:
    """One headless engine run: {steps_per_s, loss, plan} (the plan: its thread line).

    A run still going after ``cap_s`` (a thread setting that collapses under load: 10× slower) is killed
    and measured over the steps it reached (``capped``: its last step), so one variant cannot eat the bench.
    """
    run_dir = root / f"engine-{uuid.uuid4().hex[:6]}"
    argv = [sys.executable, "-m", "tui.cli", "train", "--headless", "--preset", PRESET, "--max-steps", str(steps),
            "--batch-size", str(BATCH), "--eval-every", "0", "--checkpoint-every", "0", "--set",
            "data.val_samples=16", "--run-dir", str(run_dir), *flags]
    with open(os.devnull, "w") as devnull, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, cwd=ROOT, env=_env(), stdout=devnull, stderr=err, text=True,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=cap_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its session: the engine and any data workers
            proc.wait(30)
            code = None
        err.seek(0)
        if code not in (0, None):
            raise RuntimeError(f"engine exited {code}: {err.read()[-600:]}")
    events = EventsFile(run_dir / "events.jsonl")
    events.read()
    records = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    plan = next((r["text"] for r in reversed(records) if r["type"] == "log" and r.get("stream") == "engine"), "")
    loss = next((r["loss"] for r in reversed(records) if r["type"] == "step"), float("nan"))
    lo, hi = window
    if code is None:  # killed at the cap: the window it reached (a third of it warm-up at most)
        last = events.last_step()
        lo, hi = min(lo, max(1, last // 3)), min(hi, last)
    return {"steps_per_s": steps_per_s(events.steps, lo, hi) if hi > lo else float("nan"), "loss": loss,
            "plan": plan, "capped": events.last_step() if code is None else None}


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
            variants: tuple[str, ...] = VARIANTS, cap_s: float = TIMEOUT_S) -> dict:
    """``variants``, quiet and loaded, ``rounds`` interleaved rounds: {variant: {"quiet": [..], "load": [..]}}."""
    from engine.threads import usable_cores

    cores = usable_cores().usable
    threads, tried = best_threads(max(window[1] + 5, steps // 2), (window[0] // 2 or 1, window[1] // 2), cores)
    results: dict = {name: {"quiet": [], "load": []} for name in VARIANTS}  # the ones not run stay empty
    results["_threads"], results["_tried"], results["_plans"], results["_loss"] = threads, tried, [], {}
    results["_capped"] = []
    with tempfile.TemporaryDirectory(prefix="bench-baselines-") as tmp:
        root = Path(tmp)
        run = {DATALOADER: lambda: loop_rate("dataloader", steps, window, threads),
               LIGHTNING: lambda: loop_rate("lightning", steps, window, threads),
               INLINE: lambda: loop_rate("inline", steps, window, threads),
               ENGINE: lambda: engine_rate(steps, window, root, cap_s=cap_s),
               ENGINE_T2: lambda: engine_rate(steps, window, root, ("--threads", "2"), cap_s=cap_s)}

        def timed(name: str, condition: str) -> dict:
            began = time.perf_counter()
            row = run[name]()
            took = time.perf_counter() - began
            capped = f", killed at the {cap_s:g} s cap at step {row['capped']}" if row.get("capped") else ""
            print(f"   round {index + 1}/{rounds} {condition:5} {name}: {row['steps_per_s']:.2f} steps/s "
                  f"({took:.0f} s{capped})", flush=True)
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
                    results["_loss"].setdefault(name, row["loss"])
                    if row.get("plan"):
                        results["_plans"].append(f"{condition}, {name}: {row['plan']}")
    return results


def run(quick: bool = False) -> Section:
    """Suite entry: full 100 steps (window 20-80) × 3 rounds, quiet and loaded, an engine run capped at 120 s;
    quick 40 steps (10-35) × 3, capped at 35 s (~6 min on 2 quiet cores)."""
    if smoke():
        steps, window, rounds, cap_s = 8, (3, 7), 1, TIMEOUT_S
    elif quick:
        steps, window, rounds, cap_s = 40, (10, 35), 3, 35.0
    else:
        steps, window, rounds, cap_s = 100, (20, 80), 3, 120.0
    return section(measure(steps, window, rounds, with_load=not smoke(), cap_s=cap_s), steps, window, rounds, quick)


#: Why a goal can be missed, as measured (printed with the verdict when it is).
WHY_MISSED = {
    "dataloader": "the engine does per step what the loop does not (events, heartbeat, control poll, budget "
                  "sample) and, on a 2-core box, has the same one spare core to build batches on as the loop's one "
                  "DataLoader worker (a builder thread, or one DataLoader worker when the run repays starting it), "
                  "so it can at best tie; the difference is inside the run-to-run spread",
    "lightning": "Lightning and the engine both run the same kernels with one worker; ≥ 1.05 needs the engine's "
                 "plan to find overlap Lightning's defaults miss, which a 2-core box has no room for",
}


def section(results: dict, steps: int, window: tuple[int, int], rounds: int, quick: bool) -> Section:
    """The page section from measured (or, in the smoke test, given) results."""
    quiet = {name: results[name]["quiet"] for name in VARIANTS}
    load = {name: results[name]["load"] for name in VARIANTS}
    base = quiet[DATALOADER]
    lines = [f"SensorLM `{PRESET}` preset, batch {BATCH}, {steps} steps a run, steps/s between steps {window[0]} and "
             f"{window[1]}, {rounds} interleaved round(s), each variant a process of its own. The DataLoader loop and "
             f"Lightning run at {results['_threads']} torch thread(s), the fastest for the DataLoader loop here "
             f"(tried: " + ", ".join(f"{n}: {r:.2f} steps/s" for n, r in sorted(results["_tried"].items())) + ").", "",
             "| variant | steps/s quiet | ÷ DataLoader loop | steps/s with a CPU-bound neighbour | loaded ÷ quiet | "
             "loss at the end |", "|---|---:|---:|---:|---:|---:|"]
    for name in VARIANTS:
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
    if results.get("_capped"):
        lines += ["", "Runs killed at the time cap (measured over the steps they reached): "
                  + "; ".join(results["_capped"]) + "."]
    if results["_plans"]:
        lines += ["", "The engine's thread plans (its log line):", ""] + [f"- {p}" for p in sorted(set(
            results["_plans"]))]
    verdicts = [_why(verdict("engine default ÷ DataLoader loop steps/s (quiet)", engine_dl, 1.0), "dataloader"),
                _why(verdict("engine default ÷ Lightning steps/s (quiet)", engine_l, 1.05), "lightning")]
    if load[ENGINE]:
        verdicts.append(verdict("engine default: loaded ÷ quiet steps/s", stats(ratios(load[ENGINE],
                                                                                          quiet[ENGINE]))[1], 0.9))
        verdicts.append(f"engine --threads 2: loaded ÷ quiet steps/s: "
                        f"{stats(ratios(load[ENGINE_T2], quiet[ENGINE_T2]))[1]:.3g} (the fixed setting, for contrast)")
    return Section("Fair baselines: engine vs a careful DataLoader loop and Lightning",
                   f"python -m bench --only baselines{' --quick' if quick else ''}", "\n".join(lines), verdicts)


def _why(line: str, key: str) -> str:
    return f"{line} — why: {WHY_MISSED[key]}" if "MISSED" in line else line


if __name__ == "__main__":
    standalone(run, __doc__)
