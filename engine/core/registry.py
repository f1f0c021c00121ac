"""Task registry: a task name → its ``TaskSpec`` (torch-free), and from the spec its Task class.

Built-in tasks are named here as ``"module:SPEC"`` strings, so listing them or
validating a config imports no task code and no torch. Third-party tasks plug
in through the ``sensorlm_tui.tasks`` entry-point group, each entry naming a
``TaskSpec`` (``my_pkg.spec:SPEC``). A plugin whose entry point fails to load
is reported by name when it is asked for (``TaskLoadError``, one line), and
never breaks the built-ins or the listing of the other tasks.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from importlib import metadata

from engine.core.taskspec import TaskSpec

#: Entry-point group third-party tasks register under.
GROUP = "sensorlm_tui.tasks"
#: Built-in tasks, as "module:SPEC" so listing them costs no torch import.
BUILTIN_SPECS: dict[str, str] = {
    "sensorlm": "engine.tasks.sensorlm.spec:SPEC",
    "toy": "engine.tasks.toy.spec:SPEC",
    "lm": "engine.tasks.lm.spec:SPEC",
    "gapfill": "engine.tasks.gapfill.spec:SPEC",
}
#: The task a config without ``task.name`` trains.
DEFAULT_TASK = "sensorlm"
#: Section names the core owns; a task's section cannot take one of them.
RESERVED = frozenset({"name", "version", "task", "train", "data", "checkpoint", "budget"})


class UnknownTask(LookupError):
    """No task of that name; ``str()`` names the ones there are."""


class TaskLoadError(RuntimeError):
    """A task's spec or class failed to import (a broken plugin); ``str()`` is one line naming the entry point."""


def _plugins() -> dict[str, metadata.EntryPoint]:
    try:
        return {ep.name: ep for ep in metadata.entry_points(group=GROUP)}
    except Exception:  # unreadable distribution metadata must not break the built-ins
        return {}


def task_names() -> list[str]:
    """Every task this install knows: built-ins plus entry-point plugins (loaded or not)."""
    return sorted(set(BUILTIN_SPECS) | set(_plugins()))


def _import(target: str):
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


@lru_cache(maxsize=None)
def get_spec(name: str) -> TaskSpec:
    """The spec registered under ``name``; UnknownTask or TaskLoadError (one line) otherwise."""
    if name in BUILTIN_SPECS:
        return _import(BUILTIN_SPECS[name])
    ep = _plugins().get(name)
    if ep is None:
        raise UnknownTask(f"unknown task; allowed: {', '.join(task_names())}")
    where = f"entry point {ep.name} = {ep.value} (group {GROUP})"
    try:
        spec = ep.load()
    except Exception as exc:  # anything a plugin's import raises is its own bug: name it, don't crash
        text = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
        raise TaskLoadError(f"{where} failed to load: {text[:200]}") from None
    if not isinstance(spec, TaskSpec):
        raise TaskLoadError(f"{where} is a {type(spec).__name__}, expected an engine.core.taskspec.TaskSpec")
    if spec.name != name or not name.isidentifier() or name in RESERVED:
        raise TaskLoadError(f"{where}: spec name {spec.name!r} must equal the entry point's name, be an "
                            f"identifier and not one of {', '.join(sorted(RESERVED))}")
    unbounded = next(filter(None, (s.declaration_error() for s in spec.capabilities.settings)), None)
    if unbounded:  # a live value nobody bounded reaches a running job: refuse the plugin, not the value later
        raise TaskLoadError(f"{where}: {unbounded}")
    return spec


def load_task_class(name: str):
    """Import and return the Task subclass of task ``name`` (imports torch)."""
    spec = get_spec(name)
    try:
        return _import(spec.task)
    except Exception as exc:
        if name in BUILTIN_SPECS:
            raise
        raise TaskLoadError(f"task {name}: {spec.task} failed to import: {type(exc).__name__}: {exc}"[:300]) \
            from None


def make_task(config, faults=None):
    """Build the configured task; ``faults`` is the test fault injector its ``loss()`` consults (None: none).

    The one place tasks are constructed, so every task, built-in or plugin, gets
    the hook without knowing where it comes from (engine.training.faults).
    """
    task = load_task_class(config.task.name)(config)
    task.faults = faults
    return task
