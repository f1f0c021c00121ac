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
from typing import Mapping

from engine.core.taskspec import Capabilities, Metric, Setting, TaskSpec

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
RESERVED = frozenset({"name", "version", "task", "train", "optimizer", "schedule", "evaluation", "policies",
                      "runtime", "data", "checkpoint", "budget", "autotune"})


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


def is_plugin(name: str) -> bool:
    """True for a task that comes from an entry point, not from this package."""
    return name not in BUILTIN_SPECS


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
    problem = spec_problem(spec)
    if problem:  # found here, in one line, not as an AttributeError wherever the field is first used
        raise TaskLoadError(f"{where}: {problem}")
    return spec


def _is_target(value) -> bool:
    module, _, attr = value.partition(":") if isinstance(value, str) else ("", "", "")
    return all(part.isidentifier() for part in module.split(".")) and attr.isidentifier()


def spec_problem(spec: TaskSpec) -> str | None:
    """The first field of a (plugin's) spec that is not what the engine reads from it; None when all are.

    A spec is a plain dataclass, so a plugin can hand it anything; these are
    the types every later use assumes (presets are dicts of sections, settings
    are bounded Settings, the task class a "module:Class" string, …).
    """
    from engine.core.sections import Section

    if not (isinstance(spec.config, type) and issubclass(spec.config, Section)):
        return f"config={spec.config!r:.60}: must be a subclass of sensorlm_tui.plugin.Section"
    if not _is_target(spec.task):
        return f"task={spec.task!r:.60}: must be a 'module:Class' string"
    if spec.analytic_memory is not None and not _is_target(spec.analytic_memory):
        return f"analytic_memory={spec.analytic_memory!r:.60}: must be None or a 'module:function' string"
    if not isinstance(spec.presets, Mapping) or not all(isinstance(k, str) and isinstance(v, Mapping)
                                                        for k, v in spec.presets.items()):
        return f"presets={spec.presets!r:.60}: must map preset names to dicts of config sections"
    if not isinstance(spec.default_preset, str) or not isinstance(spec.summary, str):
        return "default_preset and summary must be strings"
    return _capabilities_problem(spec.capabilities)


def _capabilities_problem(caps) -> str | None:
    if not isinstance(caps, Capabilities):
        return f"capabilities={caps!r:.60}: must be an engine.core.taskspec.Capabilities"
    metrics = [caps.primary, *caps.curves] if isinstance(caps.curves, (tuple, list)) else None
    if metrics is None or not all(isinstance(m, Metric) and isinstance(m.name, str) and m.name for m in metrics):
        return "capabilities.primary and .curves must be Metrics with a name"
    if not isinstance(caps.settings, (tuple, list)) or not all(isinstance(s, Setting) for s in caps.settings):
        return f"capabilities.settings={caps.settings!r:.60}: must be a tuple of engine.core.taskspec.Setting"
    unbounded = next(filter(None, (s.declaration_error() for s in caps.settings)), None)
    if unbounded:  # a live value nobody bounded reaches a running job: refuse the plugin, not the value later
        return unbounded
    if caps.memory not in ("analytic", "traced") or caps.eval_reduction not in ("per_batch", "pooled"):
        return "capabilities.memory must be analytic or traced, eval_reduction per_batch or pooled"
    return None


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
