"""The thread and worker plan: torch intra-op threads, data workers and prefetch depth that never oversubscribe.

Why the engine plans instead of taking torch's defaults. Measured on the 2-core
CI box: torch's default of one intra-op thread per core plus the
prefetch thread made the engine 0.53× a plain ``DataLoader(num_workers=1)``
loop, and under a neighbour's load it collapsed 15×: an OpenMP parallel region
waits for its slowest thread, so one thread descheduled by anything else (the
batch builder, the event writer, a viewer, another process) stalls every op.

Inputs (all measured, none guessed):

* **cores** the process may use: the affinity mask (``sched_getaffinity``) and
  the cgroup CPU quota (v2 ``cpu.max``, v1 ``cfs_quota_us``) up the process's
  cgroup path; never ``os.cpu_count()``, which counts the host's cores.
* **a viewer** on this machine: the in-process dashboard, or a client on the
  control socket (a Unix socket, so its process runs here).
* **batch ÷ step**: the first ``MEASURE_TAKES`` batches are built inline and
  timed against the compute between them (median, so an eval in between does
  not count).

Decisions (``plan``), in order:

1. torch threads = usable cores minus one core of *headroom* when there are
   two or more (the data path, the engine's own threads, a viewer and the
   neighbours run there, so no torch thread is descheduled mid-op), minus one
   more for a viewer on a box of four or more (on smaller ones the viewer's few
   per cent share the headroom core). ``--threads`` overrides.
2. data: built inline when building costs < ``INLINE_BELOW`` of the step
   (overlap would save less than a thread contending for the GIL costs);
   worker processes when a spare core exists and the run is long enough to repay
   starting them (``WORKER_PAYBACK_S`` of batch building ahead), as many as the
   build needs to keep up (batch ÷ step × ``SIDE_BY_SIDE``, rounded up, at most
   one per core): the first on the headroom core, further ones taken from
   torch's share; when torch is down to one thread, the last one shares the
   trainer's core and builds while the trainer waits for data (measured on the
   2-core box, demo batch 16, separate runs interleaved: 2 workers ÷ 1 worker
   median 1.06, 1.11 and 1.05 in three sessions of 3, 3 and 8 pairs, range
   0.81-1.35 on this noisy VM; steps per CPU-second 0.99: the gain is CPU the
   trainer's waits left idle, which a worker process fills, where the trainer
   building inline itself cost more than it saved, see below; the cost is one
   more process, ~250 MiB resident with torch imported); a background thread
   when the step is long enough (``THREAD_STEP_S``) that its kernels leave the
   GIL free for the builder;
   inline otherwise. Batches cheaper than ``WORKER_MIN_BATCH_S`` never go to
   workers: receiving one costs the trainer about what building it does.
   ``runtime.data_workers`` (≥ 0) overrides, as does
   ``runtime.prefetch = false``.
3. depth = two batches ahead per worker (DataLoader's ``prefetch_factor``: a
   worker descheduled for a moment does not stall the step), one for the
   thread, none inline.

The batch source that follows the plan, measures the costs and re-plans is
engine.training.batch_source. The worker processes are ``torch.utils.data``
DataLoader workers over a Sampler of the loop's keys (engine.training.batches);
the thread is engine.training.prefetch (the DataLoader has no thread mode; why
it is kept is in its docstring).

Not done, measured: when the worker is the slower side (the sensor demo on
2 cores: the trainer waits ~5-15 ms a step), letting the trainer build one
batch in N itself while the worker builds ahead. Within-run slices alternating
it on and off (400 steps, 20-step blocks) measured N = 7: 0.96-0.98, N = 10:
0.91-0.94, N = 14: 1.01-1.03 of the rate without it: the inline build costs
the trainer more than its wait saves (the two builders contend for the same
memory and caches), so the trainer only waits.

Re-planned when a live batch-size change alters the batch ÷ step balance (the
next batches are measured again; running worker processes are kept, the
sampler re-cut) and when a viewer attaches or leaves. Every
plan that differs from the last is one log line with its reason.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

#: Build cost as a fraction of the step below which data is built inline.
INLINE_BELOW = 0.02
#: Seconds of batch building left in the run that justify worker processes: each costs ~1-3 s of CPU to start
#: (spawn, import torch), on the spare core and without stalling the loop (it builds inline until they are up).
WORKER_PAYBACK_S = 3.0
#: Build cost (seconds a batch) below which worker processes are not used: the trainer's side of receiving a
#: batch from a DataLoader worker (a shared-memory handle per tensor, unpickled) costs about as much as building
#: a tiny one. Measured with the fast toy (2 × 60 inputs, batch 2) on 2 loaded cores: 1.1 ms of trainer CPU a
#: batch received against 0.25 ms built inline (a one-off timing of 600 batches each way; load ~10, noisy).
WORKER_MIN_BATCH_S = 0.002
#: Step compute (seconds) from which a builder thread overlaps instead of contending for the GIL
#: (Python's switch interval is 5 ms: a shorter step waits for the builder's turn every time).
THREAD_STEP_S = 0.02
#: How much slower a batch builds in a worker beside the running step than alone (both timed alone when
#: measuring): they share caches and memory bandwidth. On the 2-core box the demo's build went from 53 ms alone
#: to 81-95 ms beside the step, and the step from 52 ms to 68-76 ms, so the ratio measured alone understates
#: the one that paces the run by ~15 %: a build 0.87× the step alone already makes the trainer wait.
SIDE_BY_SIDE = 1.15
#: Batches each worker process keeps built ahead (DataLoader's prefetch_factor).
WORKER_AHEAD = 2


@dataclass(frozen=True)
class Cores:
    """The CPU the process may use: the affinity mask's size and the cgroup quota (cores, None = none)."""

    affinity: int
    quota: float | None = None

    @property
    def usable(self) -> int:
        """Whole cores to plan with: the smaller of the two, at least one."""
        limit = self.affinity if self.quota is None else min(self.affinity, self.quota)
        return max(1, int(limit + 1e-9))

    def describe(self) -> str:
        """'2 cores (affinity 2, no cgroup quota)'."""
        quota = "no cgroup quota" if self.quota is None else f"cgroup quota {self.quota:g}"
        return f"{self.usable} core{'s' * (self.usable != 1)} (affinity {self.affinity}, {quota})"


def cgroup_quota(root: Path = Path("/sys/fs/cgroup"), proc: Path = Path("/proc/self/cgroup")) -> float | None:
    """The tightest CPU quota (in cores) on this process's cgroup path, v2 or v1; None when unlimited."""
    quotas: list[float] = []
    try:
        lines = proc.read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0":  # v2: cpu.max = "<quota> <period>" or "max <period>", at every level
            base = root
            directory = base / path.lstrip("/")
            for level in [directory, *directory.parents]:
                if len(level.parts) < len(base.parts):
                    break
                quotas += _read_quota(level / "cpu.max")
        elif "cpu" in controllers.split(","):
            for mount in (root / "cpu", root / "cpu,cpuacct"):
                for level in [mount / path.lstrip("/"), mount]:
                    quotas += _read_quota_v1(level)
    return min(quotas) if quotas else None


def _read_quota(path: Path) -> list[float]:
    try:
        quota, period = path.read_text().split()[:2]
    except (OSError, ValueError):
        return []
    if quota == "max":
        return []
    try:
        return [int(quota) / int(period)]
    except (ValueError, ZeroDivisionError):
        return []


def _read_quota_v1(directory: Path) -> list[float]:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        period = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return []
    return [quota / period] if quota > 0 and period > 0 else []


def usable_cores() -> Cores:
    """The affinity mask and the cgroup quota of this process, read now."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return Cores(affinity, cgroup_quota())


@dataclass(frozen=True)
class Costs:
    """Measured seconds to build one batch (on one core) and to compute one step on it."""

    batch_s: float
    step_s: float

    @property
    def ratio(self) -> float:
        """Batch build ÷ step compute."""
        return self.batch_s / max(self.step_s, 1e-9)


@dataclass(frozen=True)
class Plan:
    """What to run: torch intra-op threads, data mode (inline / thread / workers), workers, depth, and why."""

    threads: int
    data: str
    workers: int = 0
    reason: str = ""

    @property
    def depth(self) -> int:
        """Batches built ahead: two per worker, one for the thread, none inline."""
        return {"inline": 0, "thread": 1}.get(self.data, self.workers * WORKER_AHEAD)

    def line(self) -> str:
        """The one log line: the choice, then the reason."""
        data = {"inline": "data built inline", "thread": "data on 1 builder thread (1 ahead)"}.get(
            self.data, f"data in {self.workers} worker process{'es' * (self.workers != 1)} ({self.depth} ahead)")
        return f"threads: {self.threads} torch thread{'s' * (self.threads != 1)}, {data} — {self.reason}"


def plan(cores: Cores, viewer: bool, costs: Costs | None, steps_left: int, threads: int = 0,
         workers: int = -1, prefetch: bool = True, no_workers: str = "") -> Plan:
    """The plan for these inputs (the rules are in the module docstring).

    ``threads`` > 0 and ``workers`` ≥ 0 are the user's overrides; ``costs`` None means not measured yet
    (data is then built inline, which is how it gets measured); ``no_workers``: why worker processes
    cannot be used here (they failed to start), empty when they can.
    """
    usable = cores.usable
    why = [cores.describe()]
    reserve = 0
    if usable >= 2:
        reserve = 1
        why.append("1 kept as headroom (data path, engine threads" + (", the viewer)" if viewer else ")"))
    if viewer and usable >= 4:
        reserve += 1
        why.append("1 more for the viewer on this machine")
    elif viewer and usable < 2:
        why.append("the viewer shares the only core")
    torch_threads = max(1, usable - reserve)

    if not prefetch:
        data, n, data_why = "inline", 0, "runtime.prefetch = false"
    elif workers >= 0:
        data, n = ("workers", workers) if workers else ("thread", 0)
        data_why = f"runtime.data_workers = {workers}"
    elif costs is None:
        data, n, data_why = "inline", 0, "measuring batch ÷ step on the first batches"
    else:
        data, n, data_why = _data_plan(costs, usable, steps_left if not no_workers else 0)
        data_why += f" ({no_workers})" if no_workers else ""
        if data == "workers" and n > 1:  # the first worker runs on the headroom core, the others on torch's
            torch_threads = max(1, usable - reserve - (n - 1))
    if threads > 0:
        torch_threads = threads
        why.append(f"--threads {threads}")
    return Plan(torch_threads, data, n, "; ".join(why + [data_why]))


def _data_plan(costs: Costs, usable: int, steps_left: int) -> tuple[str, int, str]:
    ratio = costs.ratio
    measured = f"batch {costs.batch_s * 1e3:.3g} ms ÷ step {costs.step_s * 1e3:.3g} ms = {ratio:.2f}"
    if ratio < INLINE_BELOW:
        return "inline", 0, f"{measured}: overlapping would save < {INLINE_BELOW:.0%}"
    spare = usable - 1  # torch keeps at least one core
    if spare < 1:
        return "inline", 0, f"{measured}: one core, nothing to overlap on"
    if steps_left * costs.batch_s >= WORKER_PAYBACK_S and costs.batch_s >= WORKER_MIN_BATCH_S:
        n = min(usable, max(1, math.ceil(ratio * SIDE_BY_SIDE)))
        shared = ("; the last on the trainer's core, building in its waits for data" if n > spare else "")
        return "workers", n, (f"{measured}: {n} worker process{'es' * (n != 1)} keep{'s' * (n == 1)} up without "
                              f"sharing the GIL{shared}")
    if costs.step_s >= THREAD_STEP_S:
        return "thread", 0, f"{measured}: the step's kernels leave the GIL to a builder thread"
    why = ("the run too short to repay worker processes" if costs.batch_s >= WORKER_MIN_BATCH_S else
           f"batches under {WORKER_MIN_BATCH_S * 1e3:g} ms cost less to build than to receive from a worker process")
    return "inline", 0, (f"{measured}: steps of {costs.step_s * 1e3:.2g} ms are too short for a builder thread "
                         f"(it would hold the GIL the step needs) and {why}")
