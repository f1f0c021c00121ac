"""Does ``demo`` learn? Validation metrics at step 0 and step 300 of the real engine, per training seed.

    python -m bench.demo_learning [--quick]                (train.seeds 0, 1, 2 either way: ~1 min each)
    python -m bench --only demo_learning [--quick]         (as a suite section)

Each seed is one headless ``sensorlm-tui train --preset demo`` in a temporary run directory (its own
process, the default 2 torch threads); the numbers are read back from the run's events.jsonl.
Metrics come from the fixed 64-window validation set, in batches of 16, so retrieval chance is 1/16.
Quality is not a timing: these are the same on any machine for a given torch build, and the wall time
is shown only for context.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, Section, python, smoke, standalone, verdict

#: (metric key in the eval event, label, format).
METRICS = (("psnr_db", "masked-patch PSNR (dB)", ".2f"), ("retrieval_top1", "retrieval top-1", ".3f"),
           ("token_accuracy", "caption token accuracy", ".3f"), ("val_loss", "val loss", ".3f"))


def train(seed: int, steps: int, run_dir: Path) -> tuple[list[dict], float]:
    """Run the demo headless for ``steps`` steps; its eval events and the wall seconds it took."""
    started = time.perf_counter()
    subprocess.run([python(), "-m", "tui.cli", "train", "--headless", "--preset", "demo", "--run-dir",
                    str(run_dir), "--seed", str(seed), "--max-steps", str(steps)],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=1800)
    wall = time.perf_counter() - started
    evals = []
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("type") == "eval":
            evals.append({"step": event["step"], **event["metrics"]})
    return evals, wall


def run(quick: bool = False) -> Section:
    """Suite entry: seeds 0-2, 300 steps each, quick or not (smoke: seed 0, 2 steps, numbers meaningless)."""
    steps = 2 if smoke() else 300
    seeds = [0] if smoke() else [0, 1, 2]
    rows, verdicts, gains = [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-demo-") as tmp:
        for seed in seeds:
            evals, wall = train(seed, steps, Path(tmp) / f"seed{seed}")
            first, last = evals[0], evals[-1]
            chance = last.get("retrieval_chance", 1 / 16)
            cells = [f"{first[k]:{f}} → {last[k]:{f}}" for k, _, f in METRICS]
            rows.append(f"| {seed} | {last['step']} | " + " | ".join(cells) + f" | {wall:.0f} s |")
            gains.append((last["psnr_db"] - first["psnr_db"], last["retrieval_top1"] / chance,
                          last["token_accuracy"] - first["token_accuracy"]))
    worst_psnr = min(g[0] for g in gains)
    worst_retrieval = min(g[1] for g in gains)
    worst_tokens = min(g[2] for g in gains)
    verdicts.append(verdict("demo @300: PSNR gain over the untrained model, worst seed", worst_psnr, 0.5,
                            unit=" dB"))
    verdicts.append(verdict("demo @300: retrieval top-1 ÷ chance (1/16), worst seed", worst_retrieval, 2.0))
    verdicts.append(verdict("demo @300: caption token-accuracy gain, worst seed", worst_tokens, 0.1))
    body = "\n".join([
        f"`demo` preset, {steps} steps, batch 16, the engine's own loop (cosine lr 5e-4, AdamW), headless in its "
        "own process; validation: 64 fixed windows in batches of 16 (retrieval chance 0.0625). "
        "Cells: step 0 (untrained) → last step.", "",
        "| train.seed | step | " + " | ".join(label for _, label, _ in METRICS) + " | wall |",
        "|---:|---:|" + "---|" * len(METRICS) + "---:|",
        *rows,
    ])
    return Section("SensorLM demo: what 300 steps learn", f"python -m bench --only demo_learning"
                   f"{' --quick' if quick else ''}", body, verdicts)


if __name__ == "__main__":
    standalone(run, __doc__)
