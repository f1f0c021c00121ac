"""The runs bench.long_runs opens: a finished run of N steps as this version writes it, an old one, many names.

- ``write_record_run(root, steps)``: the step record straight through ``StepWriter.append_columns`` (a
  million rows at a time: 100M steps in a couple of minutes), with the toy task's default metrics (every
  StepLogged field, each in the type engine.run.steps.fields gives it, plus its loss component
  ``components.mse``), and beside it the events.jsonl an engine leaves: the schema, RunStarted with the toy's
  config and capabilities, a step line a second (the engine's cadence, ``engine.run.sinks.STEP_LINE_S``), a
  memory sample every ``MEMORY_EVERY`` steps (the engine's CPU cadence), a system sample every ``SYSTEM_S``
  seconds, an eval every ``EVAL_EVERY`` steps, a checkpoint every ``CHECKPOINT_EVERY`` steps (the event only: no
  files), RunFinished, and a finished status.json. The run's clock is ``RATE`` steps a second.
- ``write_old_run``: the same length in the form of a run from before the record (schema 2, every step a
  line, no ``steps/``): bench.open_run.write_run, which the older benches and issue 38's numbers used.
- ``write_names_run(root, names)``: a plain loop (sensorlm_tui.loop, the real integration, in a subprocess)
  logging ``names`` metrics on each of ``NAMES_STEPS`` steps: per-layer statistics of a deep model.

The values are a plausible curve (a decaying loss with noise and rare spikes, a cosine learning rate with
warm-up, throughput jitter), seeded, so a chart has something to draw at every zoom.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from bench.common import ROOT
from bench.open_run import write_run
from engine.budget.hook import CPU_EVERY, CPU_SAMPLE_MIN_S
from engine.run import events as ev
from engine.run.sinks import STEP_LINE_S  # the engine's cadence of step lines in events.jsonl
from engine.run.steps import StepWriter, record_dir

#: Steps a second of the run's clock (the issue's live rate).
RATE = 1000.0
#: Steps between two memory samples: the engine's hook on a CPU sends one every CPU_EVERY steps, at most every
#: CPU_SAMPLE_MIN_S when nothing changes (at RATE, every 500 steps; a counted step, every CPU_MEASURE_EVERY, is one
#: of them).
MEMORY_EVERY = CPU_EVERY * math.ceil(RATE * CPU_SAMPLE_MIN_S / CPU_EVERY)
#: Seconds between two system samples (engine.training.system.SystemSampler's interval).
SYSTEM_S = 2.0
#: Steps between two evaluations and between two checkpoints of the long runs.
EVAL_EVERY = 10_000
CHECKPOINT_EVERY = 100_000
#: Rows generated and appended at a time.
CHUNK = 1 << 20
#: Steps of the many-names run (the issue's plain loop logged 40).
NAMES_STEPS = 40
T0 = 1.7e9
BATCH = 32
TRAIN_SAMPLES = 100_000


def toy_config(steps: int) -> dict:
    """The toy demo's config as RunStarted carries it, for a run of ``steps`` steps."""
    from engine.core import config as cfg

    overrides = {"train": {"max_steps": steps}, "evaluation": {"every": EVAL_EVERY},
                 "checkpoint": {"every_steps": CHECKPOINT_EVERY}}
    return cfg.load(task="toy", preset="demo", overrides=overrides).model_dump(mode="json")


def run_started(name: str, steps: int, start_step: int = 0, t: float = T0) -> ev.RunStarted:
    """The RunStarted an engine emits for the toy task (its config and capabilities)."""
    from engine.tasks.toy.spec import CAPABILITIES

    return ev.RunStarted(t=t, name=name, task="toy", preset="demo", config=toy_config(steps), params=18_000,
                         trainable=18_000, train_samples=TRAIN_SAMPLES, val_samples=64, total_steps=steps,
                         start_step=start_step, pid=os.getpid(), capabilities=CAPABILITIES.to_dict())


def columns(lo: int, hi: int, total: int, seed: int = 0) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Steps ``lo+1 .. hi`` of a ``total``-step run: the step column and every default metric."""
    rng = np.random.default_rng([seed, lo])
    step = np.arange(lo + 1, hi + 1, dtype=np.int64)
    n = len(step)
    frac = step / max(total, 1)
    loss = (0.25 * np.exp(-4 * frac) + 0.02) * rng.lognormal(0.0, 0.1, n)
    spikes = rng.random(n) < 1e-5
    loss[spikes] *= rng.uniform(5, 50, int(spikes.sum()))
    warm = np.minimum(1.0, frac / 0.05)
    lr = 3e-3 * warm * 0.5 * (1 + np.cos(math.pi * np.clip((frac - 0.05) / 0.95, 0, 1)))
    steps_per_s = RATE * rng.normal(1.0, 0.02, n)
    return step, {
        "t": T0 + step / RATE + rng.random(n) * 1e-4, "epoch": step * BATCH // TRAIN_SAMPLES, "loss": loss,
        "lr": lr, "grad_norm": np.abs(rng.normal(0.6, 0.2, n)), "samples_per_s": steps_per_s * BATCH,
        "steps_per_s": steps_per_s, "batch_size": np.full(n, BATCH), "skipped": np.zeros(n),
        "tokens_per_s": np.zeros(n), "mfu": np.zeros(n), "components.mse": loss}


def _step_event(i: int, step: np.ndarray, cols: dict[str, np.ndarray]) -> ev.StepLogged:
    return ev.StepLogged(t=float(cols["t"][i]), step=int(step[i]), epoch=int(cols["epoch"][i]),
                         loss=float(cols["loss"][i]), lr=float(cols["lr"][i]), grad_norm=float(cols["grad_norm"][i]),
                         samples_per_s=float(cols["samples_per_s"][i]), steps_per_s=float(cols["steps_per_s"][i]),
                         batch_size=BATCH, components={"mse": float(cols["loss"][i])})


def chunk_events(step: np.ndarray, cols: dict[str, np.ndarray], total: int) -> list[ev.Event]:
    """The events a run leaves in events.jsonl for these steps, in the order an engine writes them."""
    lo, hi = int(step[0]), int(step[-1])
    out: list[tuple[int, int, ev.Event]] = []
    every = max(1, int(RATE * STEP_LINE_S))
    for s in sorted({*range(-(-lo // every) * every, hi + 1, every), *([lo] if lo == 1 else []),
                     *([hi] if hi == total else [])}):
        out.append((s, 0, _step_event(s - lo, step, cols)))
    for s in range(-(-lo // MEMORY_EVERY) * MEMORY_EVERY, hi + 1, MEMORY_EVERY):
        out.append((s, 1, ev.MemorySampled(t=T0 + s / RATE, step=s, device="cpu", peak=48 << 20,
                                           rss=(900 << 20) + (s % 7919) * 4096, capacity=24 << 30,
                                           predicted=50 << 20, budget=20 << 30, ratio=0.96, source="measured")))
    system = max(1, int(RATE * SYSTEM_S))
    for s in range(-(-lo // system) * system, hi + 1, system):
        out.append((s, 2, ev.SystemSampled(t=T0 + s / RATE, cpu_percent=55.0 + s % 40, ram_used=9 << 30,
                                           ram_total=24 << 30)))
    for s in range(-(-lo // EVAL_EVERY) * EVAL_EVERY, hi + 1, EVAL_EVERY):
        val = float(cols["loss"][s - lo])
        out.append((s, 3, ev.EvalDone(t=T0 + s / RATE, step=s, val_loss=val, primary="psnr_db",
                                      metrics={"val_loss": val, "psnr_db": 10 * math.log10(1 / val)}, seconds=0.4)))
    for s in range(-(-lo // CHECKPOINT_EVERY) * CHECKPOINT_EVERY, hi + 1, CHECKPOINT_EVERY):
        out.append((s, 4, ev.CheckpointSaved(t=T0 + s / RATE, step=s, path=f"checkpoints/step-{s}.pt", kind="last",
                                             seconds=0.05, bytes=220_000)))
    out.sort(key=lambda item: (item[0], item[1]))
    return [event for _, _, event in out]


def write_record_run(root: Path, steps: int, seed: int = 0, progress=None) -> Path:
    """A finished ``steps``-step run as this version writes it (module docstring); returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    writer = StepWriter(record_dir(root))
    with open(root / "events.jsonl", "w", encoding="utf-8") as log:
        log.write(ev.to_json(ev.Schema(t=T0)) + "\n")
        log.write(ev.to_json(run_started(root.name, steps)) + "\n")
        try:
            for lo in range(0, steps, CHUNK):
                step, cols = columns(lo, min(steps, lo + CHUNK), steps, seed)
                writer.append_columns(step, cols)
                log.write("".join(ev.to_json(event) + "\n" for event in chunk_events(step, cols, steps)))
                if progress is not None:
                    progress(int(step[-1]), steps)
        finally:
            writer.close()
        end = T0 + steps / RATE
        log.write(ev.to_json(ev.RunFinished(t=end, status="finished", steps=steps, reason="max_steps reached",
                                            checkpoint=f"checkpoints/step-{steps}.pt")) + "\n")
    finished = {"pid": 1, "host": "bench", "started": T0, "heartbeat": end, "state": "finished", "step": steps,
                "total_steps": steps, "exit_code": 0, "resume_command": None}
    (root / "status.json").write_text(json.dumps(finished))
    return root


def write_old_run(root: Path, steps: int) -> Path:
    """The same length as a run from before the step record (schema 2): bench.open_run.write_run."""
    write_run(root, steps)
    return root


NAMES_SCRIPT = """
import math, sys
from sensorlm_tui.loop import cockpit
names = [f"m{i}" for i in range(int(sys.argv[2]))]
with cockpit(sys.argv[1], total_steps=int(sys.argv[3]), log_every=1) as run:
    for step in range(int(sys.argv[3])):
        run.step(loss=1.0 / (step + 1), **{n: round(math.sin(step + i), 4) for i, n in enumerate(names)})
"""


def write_names_run(root: Path, names: int, steps: int = NAMES_STEPS) -> Path:
    """A plain loop's run logging ``names`` metrics every step (module docstring); returns ``root``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", NAMES_SCRIPT, str(root), str(names), str(steps)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"the plain loop logging {names} names failed:\n{done.stderr[-2000:]}")
    return root


def disk_bytes(path: Path) -> int:
    """Bytes a directory tree takes on disk (allocated blocks, as ``du`` counts them)."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except OSError:
                pass
    return total
