"""CPU seconds a process tree has used: how many cores a benchmark variant was given, and what it bought with them.

A variant's steps/s is the product of two numbers: the cores it ran on (its
CPU-seconds per wall second) and what it did with them (steps per
CPU-second). Beside a CPU-bound neighbour the first is the kernel's decision:
with ``sched_autogroup_enabled`` on, CFS shares the CPU between sessions (each
``setsid`` makes a new autogroup), not between threads, so a variant that used
both cores of a 2-core box quietly gets about one beside one busy neighbour,
whatever its thread plan. The second is the plan's: a plan that wastes no CPU
keeps its steps per CPU-second under load; one whose OpenMP threads spin at
barriers waiting for a core they are not given loses it. Reading the tree's
CPU time at a window's two ends separates the two.

The tree is the process and every live descendant (a DataLoader worker, a
forkserver, a spawned engine), found through
``/proc/<pid>/task/<tid>/children`` where the kernel has it
(CONFIG_PROC_CHILDREN) and otherwise by one scan of every
``/proc/<pid>/stat``'s parent field (~1 ms for ~100 processes; a benchmark
reads twice a run, so either costs nothing). A process's ``utime + stime``
covers all its threads, and its ``cutime + cstime`` the children it has
reaped, so a worker that exits and is waited for inside the window stays
counted. A process that vanishes mid-read counts as 0: a reading never raises.
Not psutil: its ``children(recursive=True)`` reads every process's stat on
each call, 1.7-2.0 ms of CPU a reading against 0.11 ms here (108 processes on
the 2-core box, under load), which every ``POLL_S`` is 2 % of a core taken
from the variants being measured.

A benchmark reads every variant's tree the same way, from outside, into a
``CpuTrace``: (wall time, CPU seconds) every ``POLL_S`` while the variant runs,
so the CPU used between the two moments a variant stamped in its own clock
(``time.time()``: the end of its steps ``lo`` and ``hi``) is interpolated
from the samples around them, for a loop and for the engine alike, with no
reader inside one variant that another lacks.
"""

from __future__ import annotations

import bisect
import os
import time
from collections import defaultdict
from pathlib import Path

PROC = Path("/proc")
#: Where the kernel says whether autogroup is on ("1"), off ("0"), or lacks it (no file).
AUTOGROUP = PROC / "sys" / "kernel" / "sched_autogroup_enabled"
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: Whether this kernel lists a thread's children (otherwise descendants are found by scanning /proc).
_CHILDREN_FILES = (PROC / "self" / "task" / str(os.getpid()) / "children").exists()
#: Seconds between a CpuTrace's readings (each ~0.2-1 ms of the reader's CPU, none of the variant's).
POLL_S = 0.1


class CpuTrace:
    """A process tree's CPU seconds read at wall times (``time.time()``), so the cores it used between any two
    moments inside the readings can be told; ``sample()`` is called by the watcher every ``POLL_S``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        #: (wall time, tree CPU seconds), in time order.
        self.samples: list[tuple[float, float]] = []

    def sample(self) -> None:
        """Read the tree now (call it only while the process runs: a gone one reads 0)."""
        self.samples.append((time.time(), tree_cpu_s(self.pid)))

    def at(self, moment: float) -> float:
        """The tree's CPU seconds at ``moment``, linear between the readings around it; NaN outside them."""
        times = [t for t, _ in self.samples]
        i = bisect.bisect_left(times, moment)
        if not self.samples or i == len(times) or (i == 0 and moment < times[0]):
            return float("nan")
        if times[i] == moment:
            return self.samples[i][1]
        (t0, c0), (t1, c1) = self.samples[i - 1], self.samples[i]
        return c0 + (c1 - c0) * (moment - t0) / (t1 - t0)

    def cores(self, start: float, end: float) -> float:
        """CPU seconds per wall second between ``start`` and ``end``; NaN when either lies outside the readings."""
        return (self.at(end) - self.at(start)) / (end - start) if end > start else float("nan")


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, reaped children included) used so far by ``pid`` and its live descendants; 0.0
    when it is gone."""
    if _CHILDREN_FILES:
        own, children = _own_cpu_s, _listed_children
    else:
        cpu, kids = _scan()
        own, children = cpu.get, lambda p: kids.get(p, [])
    total, todo, seen = 0.0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:  # a pid reused mid-read could close a loop
            continue
        seen.add(p)
        used = own(p)
        if used is not None:  # a gone process: its children were reparented away, nothing to follow
            total += used
            todo += children(p)
    return total


def autogroup() -> str:
    """"on", "off" or "unknown": whether CFS shares the CPU between sessions (the kernel's autogroup)."""
    try:
        value = AUTOGROUP.read_text().strip()
    except OSError:
        return "unknown"
    return {"1": "on", "0": "off"}.get(value, "unknown")


def _stat(pid: int | str) -> list[bytes] | None:
    """The fields of /proc/<pid>/stat after the command name (which may hold spaces and ')'); None when gone."""
    try:
        text = (PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    fields = text[text.rfind(b")") + 2:].split()
    return fields if len(fields) > 14 else None


def _cpu_s(fields: list[bytes]) -> float:
    # stat fields 14-17 (utime, stime, cutime, cstime), counted from the state field (3) onwards
    return sum(int(v) for v in fields[11:15]) / _TICKS


def _own_cpu_s(pid: int) -> float | None:
    fields = _stat(pid)
    return None if fields is None else _cpu_s(fields)


def _scan() -> tuple[dict[int, float], dict[int, list[int]]]:
    """Every process's CPU seconds and every parent's children, in one pass over /proc."""
    cpu: dict[int, float] = {}
    kids: dict[int, list[int]] = defaultdict(list)
    for name in _listdir(PROC):
        if name.isdigit() and (fields := _stat(name)) is not None:
            cpu[int(name)] = _cpu_s(fields)
            kids[int(fields[1])].append(int(name))
    return cpu, kids


def _listed_children(pid: int) -> list[int]:
    out: list[int] = []
    for tid in _listdir(PROC / str(pid) / "task"):
        try:
            out += [int(c) for c in (PROC / str(pid) / "task" / tid / "children").read_text().split()]
        except (OSError, ValueError):  # the thread ended between the listing and the read
            continue
    return out


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
