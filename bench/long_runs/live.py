"""A live run for the viewer to follow: `python -m bench.long_runs.live RUN --steps N [--rate R]`.

It writes as the engine does, through the engine's own records (engine.run.offthread.run_records: events.jsonl
at its default step-line cadence, the step record on the drainer thread, status.json's heartbeat, the system
sampler), so the viewer meets exactly what a training run gives it; only the training is left out. The steps
are emitted at ``--rate`` steps a second by the clock (a pass every millisecond emits the steps due by then),
with a memory sample every generate.MEMORY_EVERY steps (the engine's CPU cadence at 1,000 steps/s), an eval
every generate.EVAL_EVERY steps and a checkpoint event every generate.CHECKPOINT_EVERY steps. A run directory
that has steps already is continued from its last one, as a resumed run is (RunStarted with its start step).

It prints ``started STEP`` when the first step is out and ``done STEP RATE`` at the end (RATE: steps a second it
achieved), and stops early, finishing the run, on SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path

from bench.long_runs.generate import CHECKPOINT_EVERY, EVAL_EVERY, MEMORY_EVERY, RATE, columns, run_started
from engine.run import events as ev
from engine.run.offthread import run_records
from engine.run.rundir import RunDir
from engine.run.sinks import EventBus, JsonlSink
from engine.run.steps import open_record
from engine.training.system import SystemSampler

#: Steps made into events at a time (their values come from generate.columns).
BATCH = 4096


def _last_step(root: Path) -> int:
    try:
        return open_record(root).last_step or 0
    except FileNotFoundError:
        return 0


def _events(step, cols, i: int) -> list[ev.Event]:
    s = int(step[i])
    out: list[ev.Event] = [ev.StepLogged(step=s, epoch=int(cols["epoch"][i]), loss=float(cols["loss"][i]),
                                         lr=float(cols["lr"][i]), grad_norm=float(cols["grad_norm"][i]),
                                         samples_per_s=float(cols["samples_per_s"][i]),
                                         steps_per_s=float(cols["steps_per_s"][i]), batch_size=32,
                                         components={"mse": float(cols["loss"][i])})]
    if s % MEMORY_EVERY == 0:
        out.append(ev.MemorySampled(step=s, device="cpu", peak=48 << 20, rss=900 << 20, capacity=24 << 30,
                                    predicted=50 << 20, budget=20 << 30, ratio=0.96, source="measured"))
    if s % EVAL_EVERY == 0:
        out.append(ev.EvalDone(step=s, val_loss=float(cols["loss"][i]), primary="psnr_db",
                               metrics={"val_loss": float(cols["loss"][i]), "psnr_db": 15.0}, seconds=0.4))
    if s % CHECKPOINT_EVERY == 0:
        out.append(ev.CheckpointSaved(step=s, path=f"checkpoints/step-{s}.pt", kind="last", seconds=0.05,
                                      bytes=220_000))
    return out


def write_live(root: Path, steps: int, rate: float, stop: threading.Event) -> tuple[int, float]:
    """Emit ``steps`` steps after the run's last one at ``rate`` a second (module docstring); (last step, rate)."""
    root.mkdir(parents=True, exist_ok=True)
    first = _last_step(root)
    total = first + steps
    run_dir = RunDir(root)
    status, records = run_records(run_dir, JsonlSink(run_dir.events))
    status.start()
    bus = EventBus([records])
    bus.emit(run_started(root.name, total, start_step=first, t=time.time()))
    sampler = SystemSampler(bus.emit).start()
    start = time.perf_counter()
    done = first
    block = None  # (first row, steps, columns) of the values being emitted
    try:
        while done < total and not stop.is_set():
            due = min(total, first + int((time.perf_counter() - start) * rate) + 1)
            while done < due:
                if block is None or done - block[0] >= len(block[1]):
                    block = (done, *columns(done, min(total, done + BATCH), total))
                i = done - block[0]
                for event in _events(block[1], block[2], i):
                    bus.emit(event)
                done += 1
                status.set_step(done)
                if done == first + 1:
                    print(f"started {done}", flush=True)
            time.sleep(0.001)
    finally:
        achieved = (done - first) / max(time.perf_counter() - start, 1e-9)
        sampler.stop()
        bus.emit(ev.RunFinished(status="finished", steps=done, reason="bench: live writer done"))
        records.close()
        status.stop(state="finished", exit_code=0)
    return done, achieved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.long_runs.live", description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--steps", type=int, required=True, help="steps to append")
    parser.add_argument("--rate", type=float, default=RATE, help="steps a second (default %(default)g)")
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    done, achieved = write_live(args.run, args.steps, args.rate, stop)
    print(f"done {done} {achieved:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
