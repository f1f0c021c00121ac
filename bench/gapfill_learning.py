"""Does the gap-filler learn? Per-band display PSNR of the learned filler against three baselines, by gap length.

    python -m bench.gapfill_learning [--quick]             (train.seeds 0, 1, 2 either way)
    python -m bench --only gapfill_learning [--quick]      (as a suite section)

Each seed is one headless ``sensorlm-tui train --task gapfill --preset demo`` in a temporary run
directory (its own process, one torch thread: on a box shared by several jobs a second thread only
spins; on a quiet one, two are faster); the data set is generated once into a
temporary cache shared by the seeds. The numbers are the last validation event's metrics: the
fixed, evenly spaced validation subset with deterministic damage, half short gaps (1-4 frames)
and half long (24-144 frames), on which the task also scores the baselines: nearest frame and
linear interpolation in time (calibrated, not aligned) and the untrained blend (aligned, prior
weights; what the model starts as). Quality is not a timing: the table is the same on any machine
for a given torch build; the wall time is there to check the demo's 5-minute budget, and it is
noisy on a shared box.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, Section, python, smoke, standalone, verdict

METHODS = (("nearest", "nearest frame"), ("linear", "linear in time"), ("blend", "untrained blend (aligned)"),
           ("model", "learned filler"))
GAPS = (("short", "short gaps"), ("long", "long gaps"), ("", "all"))
#: The demo's budget per seed on 2 CPU cores.
BUDGET_S = 300.0


def _key(method: str, gap: str) -> str:
    suffix = f"_{gap}" if gap else ""
    return f"psnr{suffix}_db" if method == "model" else f"baseline_{method}{suffix}_db"


def train(seed: int, run_dir: Path, cache: Path, steps: int | None) -> tuple[dict, float, float]:
    """One headless demo run; (its last eval's metrics, wall seconds, CPU seconds of it and its data workers)."""
    started = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    command = [python(), "-m", "tui.cli", "train", "--headless", "--task", "gapfill", "--preset", "demo",
               "--run-dir", str(run_dir), "--seed", str(seed), "--threads", "1"]
    if steps is not None:
        command += ["--max-steps", str(steps)]
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=1800,
                   env={**os.environ, "SENSORLM_TUI_CACHE": str(cache)})
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    last = {}
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("type") == "eval":
            last = {"step": event["step"], **(event.get("metrics") or {})}
    return last, wall, cpu


def run(quick: bool = False) -> Section:
    """Suite entry: seeds 0-2 at the demo's length, quick or not (smoke: seed 0, 2 steps, numbers meaningless)."""
    seeds = [0] if smoke() else [0, 1, 2]
    steps = 2 if smoke() else None
    results, walls, cpus = [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-gapfill-") as tmp:
        for seed in seeds:
            metrics, wall, cpu = train(seed, Path(tmp) / f"seed{seed}", Path(tmp) / "cache", steps)
            results.append(metrics)
            walls.append(wall)
            cpus.append(cpu)

    def cell(method: str, gap: str) -> str:
        values = [r[_key(method, gap)] for r in results]
        mean = sum(values) / len(values)
        return f"{mean:.2f}" + (f" ({min(values):.2f}–{max(values):.2f})" if len(values) > 1 else "")

    rows = [f"| {label} | " + " | ".join(cell(m, g) for g, _ in GAPS) + " |" for m, label in METHODS]
    margins = [r[_key("model", "short")] - max(r[_key(m, "short")] for m, _ in METHODS[:3]) for r in results]
    long_margins = [r[_key("model", "long")] - max(r[_key(m, "long")] for m, _ in METHODS[:3]) for r in results]
    verdicts = [
        verdict("gapfill demo: learned − best baseline at short gaps, worst seed", min(margins), 1.0, unit=" dB"),
        verdict("gapfill demo: wall time per seed on this box, worst seed (noisy; goal ≤ 300 s)", max(walls),
                BUDGET_S, higher_is_better=False, unit=" s"),
    ]
    body = "\n".join([
        f"`demo` preset (32×32 px, six bands, 2 instruments × 10 days, U-Net base 16), step "
        f"{results[0].get('step')}, train.seed {', '.join(map(str, seeds))}; validation: "
        f"64 fixed samples, half short and half long gaps. Per-band display PSNR (dB, hard display mapping, "
        "mean over bands), mean over seeds (min–max).", "",
        "| method | " + " | ".join(label for _, label in GAPS) + " |",
        "|---|" + "---:|" * len(GAPS),
        *rows, "",
        "Learned − best baseline, per seed: short gaps " + ", ".join(f"{m:+.2f}" for m in margins)
        + " dB; long gaps " + ", ".join(f"{m:+.2f}" for m in long_margins) + " dB. Wall per seed: "
        + ", ".join(f"{w:.0f} s" for w in walls) + "; CPU (user + sys, the run and its data worker) per seed: "
        + ", ".join(f"{c:.0f} s" for c in cpus) + " (on a loaded box the wall time grows, the CPU time barely).",
    ])
    return Section("Gap-filler demo: learned filler against baselines", "python -m bench --only gapfill_learning"
                   f"{' --quick' if quick else ''}", body, verdicts)


if __name__ == "__main__":
    standalone(run, __doc__)
