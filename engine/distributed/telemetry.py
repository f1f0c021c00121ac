"""Per-rank step telemetry: what each rank measures, and how rank 0 names the straggler. Torch-free.

Every ``EVERY_STEPS`` steps each rank sends rank 0 the means of its last steps
(one ``gather_object`` of a small dict): wall time a step, *work* time (from the
step's start until its gradients were ready to sync, measured by a DDP comm
hook: the part of the step that is the rank's own, before it waits on others),
data wait, and memory. Under DDP every rank's wall time is the same (the fast
ones wait in the all-reduce), so the straggler is judged on work time: the
slowest rank, when its work exceeds the other ranks' median by more than
``STRAGGLER_MIN`` of it. What it costs the job is that excess, every step:
every other rank waits that long.
"""

from __future__ import annotations

import os
import socket
import statistics

#: Steps between gathers (a gather is one small collective; ~1 ms on gloo over loopback).
EVERY_STEPS = 10
#: A rank is the straggler only when its work time exceeds the median by this fraction (noise is below it).
STRAGGLER_MIN = 0.2
#: Test fault hook: ``R:SECONDS`` makes rank R sleep that long inside each step's work (off unless set).
SLOW_ENV = "SENSORLM_TUI_SLOW_RANK"


def injected_delay(rank: int) -> float:
    """Seconds this rank sleeps a step under the test hook ``SENSORLM_TUI_SLOW_RANK`` (0 when unset)."""
    spec = os.environ.get(SLOW_ENV, "")
    who, _, seconds = spec.partition(":")
    try:
        return float(seconds) if who.strip() and int(who) == rank else 0.0
    except ValueError:
        return 0.0


class Window:
    """Sums of one rank's step measurements since the last gather."""

    def __init__(self) -> None:
        self.steps = 0
        self.step_s = self.work_s = self.data_s = 0.0

    def add(self, step_s: float, work_s: float, data_s: float) -> None:
        """Record one step."""
        self.steps += 1
        self.step_s += step_s
        self.work_s += work_s
        self.data_s += data_s

    def record(self, rank: int, step: int, memory: dict) -> dict:
        """This rank's means for the event, then start over."""
        n = self.steps
        out = {"rank": rank, "host": socket.gethostname(), "step": step, "step_s": self.step_s / n if n else None,
               "work_s": self.work_s / n if n else None, "data_s": self.data_s / n if n else None, **memory}
        self.__init__()
        return out


def straggler(records: list[dict]) -> tuple[int | None, float | None, float | None]:
    """(straggler rank or None, the other ranks' median work seconds, seconds a step it costs the job).

    The median is taken over the ranks other than the slowest: were the slowest as fast as they are, every
    step would end that much sooner (with 2 ranks, the median of both would hide half of the gap).
    """
    timed = [r for r in records if isinstance(r.get("work_s"), (int, float))]
    if len(timed) < 2:
        return None, (timed[0]["work_s"] if timed else None), None
    slowest = max(timed, key=lambda r: r["work_s"])
    median = statistics.median(r["work_s"] for r in timed if r is not slowest)
    excess = slowest["work_s"] - median
    if excess <= STRAGGLER_MIN * max(median, 1e-9):
        return None, median, 0.0
    return slowest["rank"], median, excess
