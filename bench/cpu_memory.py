"""CPU memory measurement: what counting a step's storages costs, and whether it counts right.

`python -m bench.cpu_memory [--quick]`. Two claims (engine.budget.cpu_meter):

- cost: the engine counts one step in ``hook.CPU_MEASURE_EVERY`` through a
  TorchDispatchMode. The same two optimizer steps (engine.budget.step, what
  the Trainer runs) are timed plain and counted, interleaved (A B A B …);
  the throughput ratio the engine sees is ``1 / (1 + (counted/plain − 1) /
  CPU_MEASURE_EVERY)``, per round. Goal ≥ 0.99.
- accuracy: on two presets, the counted peak of those steps against two
  held-out counts of the very same steps: torch's MemTracker (real mode,
  its own storage tracking through the dispatcher) and the profiler's
  allocator events (``truth.peak``). Goal: within 1 %.
"""

from __future__ import annotations

import time

import torch

from bench.common import Section, fmt_stats, interleave, smoke, standalone, verdict
from engine.budget import hook, truth
from engine.budget import step as stepmod
from engine.budget.cpu_meter import StepPeak, held_tensors
from engine.core import config as cfg

PRESETS = (("toy", "demo"), ("sensorlm", "demo"))


def _setup(task_name: str, preset: str):
    config = cfg.load(preset=preset, task=task_name)
    task, model, optimizer, batch_for = truth._setup(config, torch.device("cpu"))
    return config, task, model, optimizer, batch_for


def cost(task_name: str, preset: str, rounds: int) -> tuple[list[float], list[float]]:
    """(engine throughput ratio per round, counted ÷ plain step time per round)."""
    config, task, model, optimizer, batch_for = _setup(task_name, preset)
    stepmod.run_steps(task, model, optimizer, config, "cpu", batch_for)  # warm: optimizer state, caches

    def plain() -> float:
        start = time.perf_counter()
        stepmod.run_steps(task, model, optimizer, config, "cpu", batch_for)
        return time.perf_counter() - start

    def counted() -> float:
        start = time.perf_counter()
        with StepPeak(held_tensors(model, optimizer)):
            stepmod.run_steps(task, model, optimizer, config, "cpu", batch_for)
        return time.perf_counter() - start

    times = interleave({"plain": plain, "counted": counted}, rounds)
    slow = [c / p for c, p in zip(times["counted"], times["plain"])]
    return [1 / (1 + (s - 1) / hook.CPU_MEASURE_EVERY) for s in slow], slow


def accuracy(task_name: str, preset: str) -> tuple[int, int, int]:
    """(counted peak, MemTracker's, profiler's) bytes of the same two steps."""
    config, task, model, optimizer, batch_for = _setup(task_name, preset)
    with StepPeak(held_tensors(model, optimizer)) as meter:
        stepmod.run_steps(task, model, optimizer, config, "cpu", batch_for)
    return meter.peak, truth.peak(config, method="memtracker"), truth.peak(config, method="profiler")


def run(quick: bool = False) -> Section:
    """Suite entry: both presets, 9 rounds (--quick 5; smoke: toy only, 1 round)."""
    presets = PRESETS[:1] if smoke() else PRESETS
    rounds = 1 if smoke() else 5 if quick else 9
    torch.set_num_threads(1)
    rows, verdicts = [], []
    for task_name, preset in presets:
        ratios, slow = cost(task_name, preset, rounds)
        counted, tracker, profiler = accuracy(task_name, preset)
        err = max(abs(counted / tracker - 1), abs(counted / profiler - 1)) * 100
        rows.append(f"| {task_name} {preset} | {fmt_stats(slow, '.2f')} | {fmt_stats(ratios, '.4f')} | "
                    f"{counted:,} | {tracker:,} | {profiler:,} | {err:.3f} % |")
        verdicts.append(verdict(f"cpu_memory {task_name} {preset}: steps/s with sampling ÷ without",
                                sorted(ratios)[len(ratios) // 2], 0.99))
        verdicts.append(verdict(f"cpu_memory {task_name} {preset}: counted peak vs held-out counts (error)",
                                err, 1.0, higher_is_better=False, unit=" %"))
    body = "\n".join([
        f"One step in {hook.CPU_MEASURE_EVERY} counted through the dispatcher (engine.budget.cpu_meter); "
        f"{rounds} interleaved round(s) of two optimizer steps, plain vs counted, 1 torch thread. The engine's "
        "ratio is 1 / (1 + (counted/plain − 1) / CPU_MEASURE_EVERY) per round. Peaks: the counted peak of two "
        "steps against MemTracker (real mode) and the profiler's allocator events on the same steps (held out).",
        "", "| preset | counted ÷ plain step time | engine steps/s with ÷ without sampling | counted peak B | "
        "MemTracker B | profiler B | worst error |", "|---|---:|---:|---:|---:|---:|---:|", *rows])
    return Section("CPU memory: a step's peak counted through the dispatcher",
                   f"python -m bench --only cpu_memory{' --quick' if quick else ''}", body, verdicts)


if __name__ == "__main__":
    standalone(run, __doc__)
