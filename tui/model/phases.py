"""Start-up phases (PhaseStarted) before a run's first step, and the clock their elapsed times are read on.

The first minutes of a run (loading data, building the model, compiling) log
no steps; the progress panel lists these phases instead, each finished one with
its duration and the current one with its elapsed time.
"""

from __future__ import annotations

import time

from engine.run import events as ev
from tui.model.format import human_count

#: Seconds after its newest event a run's log counts as history (phase clocks stop at that event).
STALE_CLOCK_S = 3600.0


def clock(last_t: float | None) -> float:
    """Now, for a live phase's elapsed time: the wall clock, or ``last_t`` (the newest event's time) for a log
    that stopped long ago (a replayed start-up that never reached its first step must not count for days)."""
    now = time.time()
    if last_t is not None and now - last_t > STALE_CLOCK_S:
        return last_t
    return now


class Phases:
    """The start-up phases of the current engine, oldest first, and whether a step arrived since."""

    def __init__(self) -> None:
        self.phases: list[ev.PhaseStarted] = []
        #: True once a step arrived after the newest phase (start-up is over).
        self.stepped = False

    def start(self, e: ev.PhaseStarted) -> bool:
        """A phase began; the first one after steps (an engine starting again: a resume) replaces the old list.
        False for one already known: a launching dashboard hears each phase live, then again from the log; and
        for the phase in progress told again."""
        if any(p.t == e.t and p.phase == e.phase for p in self.phases):
            return False
        if self.phases and not self.stepped and self.phases[-1].phase == e.phase:
            return False  # the phase in progress, told again: an in-process dashboard tells the first one itself
        if self.stepped:
            self.phases, self.stepped = [], False
        self.phases.append(e)
        return True

    def lines(self, now: float) -> list[str]:
        """One line per phase: finished ones with their duration, the current one with its elapsed time."""
        out = []
        for i, phase in enumerate(self.phases):
            done = i + 1 < len(self.phases)
            seconds = (self.phases[i + 1].t if done else now) - phase.t
            detail = f" ({phase.detail})" if phase.detail else ""
            mark = "✓" if done else "…"
            out.append(f"{mark} {phase.phase}{detail} {max(0.0, seconds):.1f}s")
        return out


def model_summary(started: ev.RunStarted | None) -> str:
    """"532k params (532k trainable) · fp32 · CPU (1 thread) · data 10k train / 64 val" for the start-up view and
    the log: what Lightning's model summary tells ("" before RunStarted; less for a run of an older release)."""
    if started is None:
        return ""
    trainable = f" ({human_count(started.trainable)} trainable)" if started.trainable else ""
    parts = [f"{human_count(started.params)} params{trainable}"]
    # the engine's [runtime]; an integration's free-form [train] (Lightning's precision)
    precision = (started.config.get("runtime") or started.config.get("train") or {}).get("precision")
    if precision:
        parts.append(str(precision))
    parts.append(started.device_name or started.device)
    if started.train_samples:
        parts.append(f"data {human_count(started.train_samples)} train / {human_count(started.val_samples)} val")
    return " · ".join(parts)
