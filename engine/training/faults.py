"""Fault injection for tests: NaN losses, out-of-memory, crashes, a too-high LR, slow steps and slow checkpoint writes.

A TEST hook, off unless the environment variable ``SENSORLM_TUI_FAULTS`` is
set. The Trainer parses it once and hands each hook to the component that
calls it: the task gets the injector as ``task.faults`` (engine.core.registry.make_task),
and a task's ``loss()`` passes its loss through ``self.faults.on_loss(step, loss)``
when ``self.faults`` is not None; the optimizer gets ``lr_hook()``, the checkpoint
manager ``save_hook()``. So the
faults are real to the loop: it sees a NaN loss, a ``torch.OutOfMemoryError``
or a RuntimeError from the task exactly as it would from a broken model.

Spec: comma-separated items, e.g. ``SENSORLM_TUI_FAULTS="nan@12,nan@13,oom@20,slow_save=0.5"``

- ``nan@N`` / ``nan@A-B``: the loss of step N (each of steps A..B) is NaN.
- ``oom@N``: the first micro-batch of step N raises ``torch.OutOfMemoryError``.
- ``raise@N``: step N raises ``RuntimeError`` (a crash inside training).
- A trailing ``*`` (``nan@A-B*``) makes a fault fire every time the step is
  computed (data that is always bad); without it each fires once, so a step
  redone after a rollback or an OOM retry goes through.
- ``lr@N=F`` / ``lr@A-B=F``: the learning rate of step N (each of steps A..B)
  is multiplied by F, on top of the schedule: a run made to regress on
  purpose (what the abort rule is for). Optimization applies it, so the step
  events log the LR it ran at.
- ``slow@N=S`` / ``slow@A-B=S``: every loss of step N (each of steps A..B)
  sleeps S seconds, once per micro-batch: a step time the box's load cannot
  blur, that grows with grad_accum (a search's clear loser, whatever the load).
- ``slow_save=S``: every checkpoint write sleeps S seconds between its fsynced
  temp file and the rename, so a kill can land mid-write.

Steps are numbered as the events number them (1-based: ``nan@12`` makes the
StepLogged with step 12 the skipped one). The loop hands ``loss()`` the count
of steps already done, so the step being computed is that plus one.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field

from engine.tasks.protocol import TaskError

#: Environment variable holding the fault spec.
ENV = "SENSORLM_TUI_FAULTS"

_STEP_ITEM = re.compile(r"^(nan|oom|raise)@(\d+)(?:-(\d+))?(\*?)$")
_LR_ITEM = re.compile(r"^lr@(\d+)(?:-(\d+))?=(.+)$")
_SLOW_ITEM = re.compile(r"^slow@(\d+)(?:-(\d+))?=(.+)$")
_KINDS = "nan@N, nan@A-B, oom@N, raise@N (a trailing * repeats), lr@A-B=FACTOR, slow@A-B=SECONDS, slow_save=SECONDS"


class FaultSpecError(TaskError):
    """A malformed fault spec; one line naming the variable and the bad item."""


@dataclass
class FaultInjector:
    """The parsed spec and which one-shot faults have fired; see the module docstring."""

    spec: str = ""
    steps: dict[int, list[tuple[str, bool]]] = field(default_factory=dict)  # step -> [(kind, sticky)]
    slow_save_s: float = 0.0
    lr_factors: dict[int, float] = field(default_factory=dict)  # step -> LR multiplier
    slow_steps: dict[int, float] = field(default_factory=dict)  # step -> seconds each of its losses sleeps
    fired: set[tuple[str, int]] = field(default_factory=set)

    @classmethod
    def parse(cls, spec: str) -> "FaultInjector":
        """Parse a spec string; FaultSpecError naming the first bad item."""
        injector = cls(spec=spec)
        for item in (part.strip() for part in spec.split(",")):
            if not item:
                continue
            if item.startswith("slow_save="):
                try:
                    injector.slow_save_s = float(item.partition("=")[2])
                except ValueError:
                    injector.slow_save_s = -1.0
                if not 0 <= injector.slow_save_s <= 600:
                    raise FaultSpecError(f"{ENV}: {item!r}: slow_save takes seconds in [0, 600]")
                continue
            if match := _LR_ITEM.match(item):
                try:
                    factor = float(match.group(3))
                except ValueError:
                    factor = -1.0
                if not 0 < factor <= 1e6:
                    raise FaultSpecError(f"{ENV}: {item!r}: lr takes a factor in (0, 1e6]")
                for step in _steps(item, match.group(1), match.group(2)):
                    injector.lr_factors[step] = factor
                continue
            if match := _SLOW_ITEM.match(item):
                seconds = _number(match.group(3))
                if not 0 <= seconds <= 60:
                    raise FaultSpecError(f"{ENV}: {item!r}: slow takes seconds in [0, 60]")
                injector.slow_steps.update(dict.fromkeys(_steps(item, match.group(1), match.group(2)), seconds))
                continue
            match = _STEP_ITEM.match(item)
            if not match:
                raise FaultSpecError(f"{ENV}: {item!r}: unknown fault; allowed: {_KINDS}")
            kind, sticky = match.group(1), bool(match.group(4))
            for step in _steps(item, match.group(2), match.group(3)):
                injector.steps.setdefault(step, []).append((kind, sticky))
        return injector

    def on_loss(self, step: int, loss):
        """Called by a task's loss() with the loop's ``step`` (steps done so far); returns the (maybe NaN) loss."""
        number = step + 1
        if number in self.slow_steps:
            time.sleep(self.slow_steps[number])
        for kind, sticky in self.steps.get(number, ()):
            if not sticky and (kind, number) in self.fired:
                continue
            self.fired.add((kind, number))
            if kind == "nan":
                loss = loss * float("nan")  # NaN in the graph too, so gradients are non-finite like a real blow-up
            elif kind == "oom":
                import torch

                raise torch.OutOfMemoryError(f"injected out of memory at step {number} ({ENV})")
            elif kind == "raise":
                raise RuntimeError(f"injected crash at step {number} ({ENV})")
        return loss

    def lr_factor(self, step: int) -> float:
        """The LR multiplier of the optimizer step after ``step`` steps done (1.0 where no lr fault is set)."""
        return self.lr_factors.get(step + 1, 1.0)

    def lr_hook(self):
        """What Optimization multiplies each step's LR by (None without an ``lr@`` item)."""
        return self.lr_factor if self.lr_factors else None

    def save_hook(self):
        """What a checkpoint write calls between its fsynced temp file and the rename (None without slow_save)."""
        if self.slow_save_s <= 0:
            return None
        delay = self.slow_save_s
        return lambda tmp: time.sleep(delay)


def from_env(environ: dict | None = None) -> FaultInjector | None:
    """The injector the environment asks for, or None (the normal case: no faults, no cost)."""
    spec = (os.environ if environ is None else environ).get(ENV, "").strip()
    if not spec:
        return None
    return FaultInjector.parse(spec)


def _number(text: str) -> float:
    """``text`` as a float, or -1.0 (out of every item's range) when it is not a number."""
    try:
        return float(text)
    except ValueError:
        return -1.0


def _steps(item: str, first: str, last: str | None) -> range:
    """Steps ``first`` (..``last``) of an item, 1-based; FaultSpecError for a range that is not A <= B."""
    start = int(first)
    stop = int(last) if last else start
    if start < 1 or stop < start or stop - start > 1_000_000:
        raise FaultSpecError(f"{ENV}: {item!r}: steps start at 1 and a range must be A-B with A <= B")
    return range(start, stop + 1)
