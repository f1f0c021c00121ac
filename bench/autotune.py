"""Autotune against an exhaustive grid over the same space: `python -m bench.autotune [--quick]`.

Two workloads on CPU, each from a deliberately poor start: the SensorLM ``demo``
preset at effective batch 16 in micro-batches of 4 with the math attention
backend, over micro-batch × attention backend × activation checkpointing; and
the ``lm`` demo with LoRA at a fixed sequence length, from micro-batches of 2
with activation checkpointing on, over micro-batch × activation checkpointing.
Each under a memory budget (``--vram-gb``) set between the predicted peaks of
the grid's combinations, so part of the grid is predicted not to fit: the grid
does not run those (the engine's start guard predicts the same and, under
``--vram-gb``, would cap their batch: another combination), and the autotune
must never try them.

- **Grid**: every combination in its own engine process (headless, its own
  run directory), its rate (samples/s; tokens/s for the LM) measured from the
  run's own step events over a steady window.
- **Autotune**: one engine process from the poor start with ``--autotune``
  over the same settings (``autotune.settings`` names them, ``name=a|b`` the
  values where the grid narrows them); its search time is its AutotuneChose's
  seconds, its choice is scored by the *grid's* rate for the chosen
  combination (one measuring method for both).
- Interleaved: each round runs the autotune process and a grid pass (order
  alternating, the grid's combinations shuffled), so machine drift hits both.

Goals: chosen ≥ 95 % of the grid's best rate; search time ≤ 10 % of the
grid's wall time; 0 out-of-memory events (OOM warnings, OOM back-offs, and
candidates whose measured peak exceeded the budget, which would have run out
of memory on a device of that size).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from bench.common import ROOT, Section, fmt_stats, smoke, standalone, stats, verdict
from bench.run_events import recorded

#: Goals (the issue's acceptance).
GOAL_RATE, GOAL_TIME = 0.95, 0.10
#: Seconds an engine process may take (a combination that collapses under load must not eat the bench).
CAP_S = 600.0


@dataclass(frozen=True)
class Workload:
    """A task from a poor start, and the space both the grid and the autotune cover."""

    name: str
    flags: tuple[str, ...]
    #: setting name → values, in the flags' spelling: (flag for a value, the value) pairs.
    space: dict[str, tuple]
    #: Samples per step (the effective batch) and what one sample counts (tokens per sample; 1: samples/s).
    batch: int
    per_sample: int
    unit: str

    def combos(self) -> list[dict]:
        """Every combination of the space's values."""
        names = list(self.space)
        return [dict(zip(names, values)) for values in itertools.product(*(self.space[n] for n in names))]

    def tune_settings(self) -> list[str]:
        """``autotune.settings`` entries naming the same space (values written out)."""
        return [f"{name}={'|'.join(_text(v) for v in values)}" for name, values in self.space.items()]


def _text(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _setting_flags(workload: Workload, combo: dict) -> list[str]:
    out = []
    for name, value in combo.items():
        out += ["--grad-accum", str(value)] if name == "grad_accum" else [f"--{name.replace('_', '-')}", _text(value)]
    return out


def workloads(quick: bool) -> list[Workload]:
    """SensorLM demo and LM LoRA (smoke: the toy task over two micro-batchings)."""
    if smoke():
        return [Workload("toy (smoke)", ("--task", "toy", "--batch-size", "8", "--grad-accum", "4"),
                         {"grad_accum": (1, 4)}, 8, 1, "samples/s")]
    ga = (1, 4, 16) if quick else (1, 2, 4, 8, 16)  # each workload's start among them
    sensor = Workload("SensorLM demo", ("--preset", "demo", "--batch-size", "16", "--grad-accum", "4",
                                        "--attn-backend", "math", "--set", "sensorlm.data.val_samples=16"),
                      {"grad_accum": ga, "attn_backend": ("sdpa", "math") if quick else ("sdpa", "math", "chunked"),
                       **({} if quick else {"activation_checkpointing": (False, True)})}, 16, 1, "samples/s")
    lm = Workload("LM demo, LoRA", ("--task", "lm", "--preset", "demo", "--batch-size", "16", "--grad-accum", "8",
                                    "--set", "lm.finetune='lora'", "--activation-checkpointing", "true"),
                  {"grad_accum": (1, 8, 16) if quick else (1, 2, 4, 8, 16), "activation_checkpointing": (False, True)},
                  16, 128, "tokens/s")
    return [sensor, lm]


# -- the budget ----------------------------------------------------------------------------------------
def predicted_peaks(workload: Workload, device: str = "cpu") -> dict[tuple, int]:
    """Each combination's predicted peak (bytes), as the engine's guard predicts it on ``device``."""
    from engine.budget import plan as planner
    from engine.core import config as cfg
    from engine.core.cli_args import OneLineParser, add_train_arguments, overrides_from

    parser = OneLineParser(prog="bench")
    add_train_arguments(parser)
    out = {}
    for combo in workload.combos():
        args = parser.parse_args([*workload.flags, *_setting_flags(workload, combo)])
        config = cfg.load(args.config, preset=args.preset, overrides=overrides_from(args), task=args.task)
        out[_key(combo)] = planner.predictor_for(config, device)().total
    return out


def budget_gb(peaks: dict[tuple, int], start: tuple, safety: float = 0.9, reserve: int = 0) -> float:
    """A --vram-gb whose budget excludes about the top third of the predicted peaks, the start kept inside
    (``reserve``: what the engine takes off a CUDA budget for the context, engine.budget.plan.resolve_budget)."""
    levels = sorted(set(peaks.values()))
    keep = max(-(-2 * len(levels) // 3) - 1, levels.index(peaks[start]))  # the last level inside the budget
    above = levels[keep + 1] if keep + 1 < len(levels) else levels[keep] * 1.02
    return ((levels[keep] + above) / 2 + reserve) / safety / (1 << 30)


def _key(combo: dict) -> tuple:
    return tuple(sorted((k, _text(v)) for k, v in combo.items()))


# -- running engines -----------------------------------------------------------------------------------
def _engine(flags: list[str], run_dir: Path, stop_when=None, cap_s: float = CAP_S) -> tuple[int | None, list]:
    """A headless engine process on ``run_dir``: (exit code or None when stopped, its events)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "NO_COLOR": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "tui.cli", "train", "--headless", "--run-dir", str(run_dir),
                             "--eval-every", "0", "--checkpoint-every", "0", *flags], cwd=ROOT, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + cap_s
    events: list = []
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
        events = _events(run_dir)
        if stop_when is not None and stop_when(events):
            break
    code = proc.poll()
    if code is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return code, _events(run_dir)


def _events(run_dir: Path) -> list[dict]:
    try:
        lines = (run_dir / "events.jsonl").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def grid_point(workload: Workload, combo: dict, vram: float, steps: tuple[int, int], root: Path,
               fits: bool = True) -> dict:
    """One combination in its own process: {rate, seconds, refused}; one predicted not to fit is not started
    (under --vram-gb the engine's guard would cap its batch instead: another combination)."""
    if not fits:
        return {"rate": None, "seconds": 0.0, "refused": True}
    began = time.perf_counter()
    run_dir = root / f"grid-{uuid.uuid4().hex[:6]}"
    code, _ = _engine([*workload.flags, *_setting_flags(workload, combo), "--vram-gb", f"{vram:.9f}",
                       "--max-steps", str(steps[1])], run_dir)
    seconds = time.perf_counter() - began
    if code == 2:
        return {"rate": None, "seconds": seconds, "refused": True}
    times = recorded(run_dir)  # every step's time (the log keeps a step line a second)
    lo, hi = steps
    rate = (hi - lo) * workload.batch * workload.per_sample / (times[hi] - times[lo]) \
        if lo in times and hi in times and times[hi] > times[lo] else float("nan")
    return {"rate": rate, "seconds": seconds, "refused": False}


def autotune_run(workload: Workload, vram: float, window: int, root: Path) -> dict:
    """The poor start with --autotune over the same space: its AutotuneStarted / AutotuneChose and OOM count."""
    settings = "[" + ", ".join(f"'{entry}'" for entry in workload.tune_settings()) + "]"
    began = time.perf_counter()
    _, events = _engine([*workload.flags, "--vram-gb", f"{vram:.9f}", "--max-steps", "100000", "--autotune",
                         "--set", f"autotune.settings={settings}", "--set", f"autotune.window_steps={window}",
                         "--set", "autotune.max_candidates=64"],
                        root / f"tune-{uuid.uuid4().hex[:6]}",
                        stop_when=lambda evs: any(e.get("type") == "autotune_chose" for e in evs))
    started = next((e for e in events if e.get("type") == "autotune_started"), None)
    chose = next((e for e in events if e.get("type") == "autotune_chose"), None)
    if started is None or chose is None:
        raise RuntimeError(f"{workload.name}: the autotune did not finish (events: "
                           f"{[e.get('type') for e in events][-8:]})")
    budget = started["budget"]
    ooms = sum(1 for e in events if (e.get("type") == "warning" and "out of memory" in e.get("text", ""))
               or (e.get("type") == "setting" and "out of memory" in (e.get("reason") or "")))
    over = sum(1 for row in chose["table"] if budget and row.get("measured") and row["measured"] > budget)
    return {"chose": chose, "started": started, "ooms": ooms + over, "wall": time.perf_counter() - began}


def measure(workload: Workload, rounds: int, steps: tuple[int, int], window: int) -> dict:
    """``rounds`` interleaved rounds of (autotune, grid pass); the raw results."""
    peaks = predicted_peaks(workload)
    start = _key({n: _start_value(workload, n) for n in workload.space})
    vram = budget_gb(peaks, start)
    grid: dict[tuple, list[dict]] = {_key(c): [] for c in workload.combos()}
    tunes: list[dict] = []
    grid_walls: list[float] = []
    rng = random.Random(0)
    with tempfile.TemporaryDirectory(prefix="bench-autotune-") as tmp:
        for index in range(rounds):
            order = ["tune", "grid"] if index % 2 == 0 else ["grid", "tune"]
            for part in order:
                if part == "tune":
                    tunes.append(autotune_run(workload, vram, window, Path(tmp)))
                    c = tunes[-1]["chose"]
                    print(f"   round {index + 1} autotune: {c['status']} {c['settings']} in {c['seconds']:.1f} s",
                          flush=True)
                    continue
                combos = workload.combos()
                rng.shuffle(combos)
                began = time.perf_counter()
                for combo in combos:
                    fits = peaks[_key(combo)] <= vram * 0.9 * (1 << 30)  # budget.safety: the guard's own test
                    grid[_key(combo)].append(grid_point(workload, combo, vram, steps, Path(tmp), fits))
                grid_walls.append(time.perf_counter() - began)
                print(f"   round {index + 1} grid: {len(combos)} combinations in {grid_walls[-1]:.0f} s", flush=True)
    return {"peaks": peaks, "vram": vram, "grid": grid, "tunes": tunes, "grid_walls": grid_walls, "start": start}


def _start_value(workload: Workload, name: str):
    flags = list(workload.flags)
    flag = "--grad-accum" if name == "grad_accum" else f"--{name.replace('_', '-')}"
    if flag in flags:
        text = flags[flags.index(flag) + 1]
        return next(v for v in workload.space[name] if _text(v) == text)
    return workload.space[name][0]


# -- the page ------------------------------------------------------------------------------------------
def summarize(workload: Workload, results: dict) -> tuple[list[str], list[str]]:
    """(markdown lines, verdicts) of one workload's results."""
    import statistics

    grid, tunes = results["grid"], results["tunes"]
    medians = {k: statistics.median([r["rate"] for r in rs]) for k, rs in grid.items()
               if rs and not rs[0]["refused"] and all(r["rate"] == r["rate"] for r in rs)}
    refused = [k for k, rs in grid.items() if rs and rs[0]["refused"]]
    best_key = max(medians, key=medians.get)
    scores = [medians.get(_key(t["chose"]["settings"]), float("nan")) / medians[best_key] for t in tunes]
    share = [t["chose"]["seconds"] / wall for t, wall in zip(tunes, results["grid_walls"])]
    ooms = sum(t["ooms"] for t in tunes)
    lines = [f"**{workload.name}** ({', '.join(workload.flags)}), budget --vram-gb {results['vram']:.4g}: "
             f"{len(refused)} of {len(grid)} combinations predicted not to fit (not run by the grid).", "",
             f"| combination | predicted peak | grid {workload.unit} (median, min–max) |", "|---|---:|---:|"]
    for key, runs in sorted(grid.items(), key=lambda kv: -medians.get(kv[0], -1)):
        shown = " · ".join(f"{k} {v}" for k, v in key)
        cell = "refused (predicted not to fit)" if key in refused else fmt_stats([r["rate"] for r in runs], ".4g")
        mark = " **best**" if key == best_key else ""
        lines.append(f"| {shown}{mark} | {results['peaks'][key] / 2**20:.1f} MiB | {cell} |")
    lines += ["", "| round | autotune chose | its grid rate ÷ grid best | search s | grid wall s | share | "
              "candidates | OOM events |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for i, (t, score, wall) in enumerate(zip(tunes, scores, results["grid_walls"]), 1):
        c = t["chose"]
        lines.append(f"| {i} | {c['status']}: {' · '.join(f'{k} {_text(v)}' for k, v in c['settings'].items())} | "
                     f"{score:.3f} | {c['seconds']:.1f} | {wall:.0f} | {c['seconds'] / wall:.3f} | "
                     f"{len(c['table'])} measured, {t['started']['refused']} refused | {t['ooms']} |")
    verdicts = [verdict(f"{workload.name}: autotune's choice ÷ grid best", stats(scores)[0], GOAL_RATE),
                verdict(f"{workload.name}: search time ÷ grid wall time", stats(share)[2], GOAL_TIME, False),
                verdict(f"{workload.name}: out-of-memory events", float(ooms), 0.0, False)]
    return lines, verdicts


def run(quick: bool = False) -> Section:
    """Suite entry: full: 2 interleaved rounds, 30 + 10 combinations; quick: 1 round, 6 + 6; smoke: toy, 2."""
    rounds = 1 if quick or smoke() else 2
    # the full run's windows are longer: a 10 % edge (sdpa over math) must stand above a 6-step window's noise
    steps, window = ((3, 8), 2) if smoke() else ((8, 28), 6) if quick else ((8, 28), 10)
    lines = [f"CPU, each engine in its own process; grid rates over steps {steps[0]}-{steps[1]}; the autotune's "
             f"windows {window} timed steps after its warm-up; {rounds} interleaved round(s).", ""]
    verdicts: list[str] = []
    for workload in workloads(quick):
        print(f"   {workload.name}: {len(workload.combos())} combinations", flush=True)
        part, said = summarize(workload, measure(workload, rounds, steps, window))
        lines += part + [""]
        verdicts += said
    return Section("Autotune against an exhaustive grid", f"python -m bench --only autotune{' --quick' * quick}",
                   "\n".join(lines), verdicts)


if __name__ == "__main__":
    standalone(run, __doc__)
