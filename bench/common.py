"""Shared benchmark plumbing: interleaved repeats, min/median/max, machine facts, markdown sections.

Every benchmark measures ratios within one run, interleaving variants
(A B A B …) so machine drift cancels; absolute times are reported but the
claims rest on the ratios.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Section:
    """One benchmark's results: a title, the command that reproduces it, a markdown body, goal verdicts."""

    title: str
    command: str
    body: str
    verdicts: list[str] = field(default_factory=list)
    skipped: str | None = None

    def show(self) -> None:
        """Print it as the page has it: the title, the body, then each verdict as a list item."""
        print(f"## {self.title}\n\n{self.body}\n")
        for line in self.verdicts:
            print("- " + line)


def interleave(variants: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Run each variant once per round, in alternating order, ``repeats`` rounds; each returns a number."""
    out: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for round_index in range(repeats):
        order = names if round_index % 2 == 0 else list(reversed(names))
        for name in order:
            out[name].append(variants[name]())
    return out


def stats(values: list[float]) -> tuple[float, float, float]:
    """(min, median, max)."""
    return min(values), statistics.median(values), max(values)


def fmt_stats(values: list[float], spec: str = ".3f") -> str:
    """'median (min–max)' for a table cell."""
    low, mid, high = stats(values)
    return f"{mid:{spec}} ({low:{spec}}–{high:{spec}})"


def ratios(numerator: list[float], denominator: list[float]) -> list[float]:
    """Pairwise ratios of two interleaved series (round by round, so drift cancels)."""
    return [a / b for a, b in zip(numerator, denominator) if b]


def verdict(name: str, value: float, goal: float, higher_is_better: bool = True, unit: str = "") -> str:
    """'met' / 'missed by X' line for the summary."""
    met = value >= goal if higher_is_better else value <= goal
    sign = "≥" if higher_is_better else "≤"
    if met:
        return f"{name}: {value:.3g}{unit} — goal {sign} {goal:g}{unit} met"
    miss = (goal - value) if higher_is_better else (value - goal)
    return f"{name}: {value:.3g}{unit} — goal {sign} {goal:g}{unit} MISSED by {miss:.3g}{unit}"


def machine() -> str:
    """One paragraph describing this machine and the software versions."""
    try:
        import torch

        torch_version = torch.__version__
        cuda = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA"
    except ImportError:
        torch_version, cuda = "not installed", "no CUDA"
    try:
        model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                     platform.processor())
    except OSError:
        model = platform.processor()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem = float("nan")
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = "?"
    try:  # the box is shared: how busy it was is part of the result (ratios cancel most, not all, of it)
        load = "load average {:.1f} / {:.1f} / {:.1f} (1 / 5 / 15 min) at the start".format(*os.getloadavg())
    except OSError:
        load = "load average unknown"
    return (f"{model}, {cores} cores, {mem:.0f} GiB RAM, {cuda}; Python {platform.python_version()}, "
            f"torch {torch_version}; commit {commit}; {time.strftime('%Y-%m-%d %H:%M %Z')}; {load}")


def smoke() -> bool:
    """True when ``BENCH_SMOKE=1``: each module runs its tiniest size (the CI smoke test; numbers meaningless)."""
    return os.environ.get("BENCH_SMOKE", "") not in ("", "0")


def python() -> str:
    """The interpreter to run sub-benchmarks with."""
    return sys.executable


def standalone(run: Callable[..., Section], doc: str) -> None:
    """`python -m bench.<name> [--quick]`: run one benchmark module and print its section."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    section = run(quick=parser.parse_args().quick)
    print(section.body)
    print("\n".join(section.verdicts))


class GpuBusy:
    """NVML's GPU utilisation, sampled at 10 Hz on a thread of its own from ``start()`` until ``stop()``.

    The GPU rows read how idle the GPU was while the engine trained; the reader is made on the sampling
    thread, so a row that never starts it never touches NVML.
    """

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    @property
    def idle_pct(self) -> float | None:
        """100 minus the mean utilisation over the samples; None when NVML gave none."""
        return 100 - sum(self.samples) / len(self.samples) if self.samples else None

    def _sample(self) -> None:
        from engine.budget.nvml import gauges

        while not self._stop.wait(0.1):
            value = gauges(0)[0]
            if value is not None:
                self.samples.append(float(value))


class Periodic:
    """``sample()`` every ``interval`` seconds on a daemon thread of its own, from ``start()`` until ``stop()`` or a
    ``sample()`` that returns False: the loop the bench's watchers of a run share; each keeps what it reads."""

    #: The thread's name (in a stack dump of a hung bench).
    thread_name = "sampler"

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=self.thread_name)

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def sample(self) -> bool | None:
        """Read once; False ends the sampling."""
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set() and self.sample() is not False:
            self._stop.wait(self.interval)


class LoadSampler:
    """The 1-minute load average, read every ``interval`` seconds on a thread of its own, from ``start()`` (or
    entering a ``with``) until ``stop()``: how busy the machine was *through* a measurement, not only at its
    start (``machine()``'s figure is the neighbours' before the suite began).

    ``summary()`` is the line a section prints beside its rows. A long section can ``mark(name)`` a phase and
    read ``summary(name)`` for the samples taken since that mark (until the next one).
    """

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        #: (time.monotonic(), 1-minute load average) per sample.
        self.samples: list[tuple[float, float]] = []
        self._marks: list[tuple[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True, name="load-sampler")

    def __enter__(self) -> "LoadSampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "LoadSampler":
        self._read()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2 * self.interval)
        self._read()

    def mark(self, name: str) -> None:
        """Begin phase ``name`` (its samples run until the next mark or the end)."""
        self._marks.append((name, time.monotonic()))

    def state(self) -> dict:
        """What was sampled, as JSON keeps it (``joined`` reads it back)."""
        return {"interval": self.interval, "samples": self.samples, "marks": self._marks}

    @classmethod
    def joined(cls, states: list[dict]) -> "LoadSampler":
        """A stopped sampler holding the samples and marks of several runs' ``state()`` (a section measured in
        parts, one process each: time.monotonic() is the machine's clock since boot, shared by the processes)."""
        out = cls(states[0]["interval"] if states else 1.0)
        out.samples = sorted((at, load) for state in states for at, load in state["samples"])
        out._marks = sorted(((name, at) for state in states for name, at in state["marks"]), key=lambda m: m[1])
        return out

    def values(self, phase: str | None = None) -> list[float]:
        """The load averages sampled (in ``phase`` only, when given)."""
        if phase is None:
            return [load for _, load in self.samples]
        bounds = [(name, start, end) for (name, start), (_, end) in
                  zip(self._marks, [*self._marks[1:], ("", float("inf"))])]
        return [load for stamp, load in self.samples
                for name, start, end in bounds if name == phase and start <= stamp < end]

    def summary(self, phase: str | None = None) -> str:
        """'load average 1.2 (0.9–2.0) over 63 samples, 1 s apart' (median (min–max) of the 1-minute figure)."""
        values = self.values(phase)
        if not values:
            return "load average not sampled"
        return (f"load average {fmt_stats(values, '.1f')} over {len(values)} samples {self.interval:g} s apart "
                "(1-minute figure, median (min–max))")

    def _read(self) -> None:
        try:
            self.samples.append((time.monotonic(), os.getloadavg()[0]))
        except OSError:
            pass

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._read()
