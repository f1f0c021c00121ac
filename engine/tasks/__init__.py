"""Task registry: a task name → the class that supplies model, data, loss and metrics.

Tasks are imported lazily (they import torch). Third-party tasks plug in
through the ``sensorlm_tui.tasks`` entry-point group, each entry naming a
``module:Class`` that subclasses ``engine.tasks.base.Task``.
"""

from __future__ import annotations

import importlib
from importlib import metadata

#: Built-in tasks, as "module:Class" so listing them costs no torch import.
BUILTIN_TASKS: dict[str, str] = {
    "sensorlm": "engine.tasks.sensorlm:SensorLMTask",
    "toy": "engine.tasks.toy:ToyTask",
}


def task_names() -> list[str]:
    """Every task this install knows: built-ins plus entry-point plugins."""
    names = set(BUILTIN_TASKS)
    try:
        names.update(ep.name for ep in metadata.entry_points(group="sensorlm_tui.tasks"))
    except Exception:  # a broken plugin's metadata must not break the built-ins
        pass
    return sorted(names)


def load_task_class(name: str):
    """Import and return the Task subclass registered under ``name`` (KeyError if none)."""
    target = BUILTIN_TASKS.get(name)
    if target is None:
        for ep in metadata.entry_points(group="sensorlm_tui.tasks"):
            if ep.name == name:
                return ep.load()
        raise KeyError(name)
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)


def make_task(config):
    """Build the configured task and attach the test fault injector (``task.faults``, None unless asked for).

    The one place tasks are constructed for training, so every task — built-in or
    plugin — gets the SENSORLM_TUI_FAULTS hook without knowing about it; a task
    only has to pass its loss through ``self.faults.on_loss`` (see engine.tasks.faults).
    """
    from engine.tasks import faults

    task = load_task_class(config.task.name)(config)
    task.faults = faults.from_env()
    return task
