"""What a run is set to now: its live settings (the newest change, else the config) and its memory budget.

Setting changes (SettingChanged) are kept as markers, drawn as vertical lines
on the loss plot; the newest marker of a name is that setting's value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.core.live_table import ENGINE, LiveTable
from engine.core.taskspec import Capabilities
from engine.run import events as ev


@dataclass(frozen=True)
class Marker:
    """A setting change drawn as a vertical line on the loss plot."""

    step: int
    name: str
    old: Any
    new: Any


def is_marked(name: str, capabilities: Capabilities, engine: LiveTable = ENGINE) -> bool:
    """True for a setting whose changes are drawn on the loss plot: one of the run's live table (the engine's, OOM
    recovery's grad_accum among them, or the task's declared ones). The "state", "checkpoint" and
    "reserved_bytes" acks are control replies, not training settings."""
    return engine.get(name) is not None or capabilities.setting(name) is not None


def setting_value(name: str, markers: list[Marker], last_step: ev.StepLogged | None, config: dict,
                  capabilities: Capabilities) -> Any:
    """The current value of a live setting (``train.<name>`` or where the task declares it), newest change first.

    ``lr`` is the peak LR the schedule scales (what ``set lr`` changes), not
    the scheduled value of the last step (``last_step.lr``).
    """
    for marker in reversed(markers):
        if marker.name == name:
            return marker.new
    if name == "batch_size" and last_step is not None and last_step.batch_size:
        return last_step.batch_size
    declared = capabilities.setting(name)
    if declared is not None:
        node = config
        for part in declared.path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return node
    # Undeclared (a run from before capabilities): train.<name>, else the first section that has it.
    sections = [config.get("train")] + [v for k, v in config.items() if k != "train"]
    return next((sec[name] for sec in sections if isinstance(sec, dict) and name in sec), None)


def budget_bytes(last_memory: ev.MemorySampled | None, started: ev.RunStarted | None) -> int | None:
    """The memory budget: the newest MemorySampled.budget, else RunStarted.budget.budget."""
    if last_memory is not None and last_memory.budget:
        return last_memory.budget
    return started.budget.budget if started else None


def capacity_bytes(last_memory: ev.MemorySampled | None, started: ev.RunStarted | None) -> int | None:
    """Device capacity: the newest MemorySampled.capacity, else RunStarted.budget.capacity."""
    if last_memory is not None and last_memory.capacity:
        return last_memory.capacity
    return started.budget.capacity if started else None
