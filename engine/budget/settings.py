"""The knobs the budget varies, applied to a RunConfig: the run's live settings, and the precision it plans.

Torch-free. Which settings there are, where each lives and whether it moves
memory is the run's live table (engine.core.live_table: the engine's own
``batch_size``, ``grad_accum``, ``lr``, ``threads``, ``data_workers``, then the
task's declared ``Setting``s); the budget adds only ``precision``, which
``plan`` and the trace vary but no live change reaches. ``with_settings``
returns a validated copy, so a bad value from a plan is the config's own
one-line error naming the field; ``written`` writes values the engine's door
already admitted (a live change), which nothing judges again.
"""

from __future__ import annotations

from typing import Any

from engine.core.config import RunConfig, validate
from engine.core.live_table import ENGINE, LiveTable

#: Settings the budget plans that are not live, → their dotted config path.
PLANNED = {"precision": "runtime.precision"}


def table_of(config: RunConfig) -> LiveTable:
    """The run's live settings: the engine's, then its task's declared ones."""
    from engine.core.registry import get_spec

    return ENGINE.for_task(get_spec(config.task.name).capabilities)


def declared(config: RunConfig) -> tuple:
    """The task's declared live settings (engine.core.taskspec.Setting), in declaration order."""
    from engine.core.registry import get_spec

    return get_spec(config.task.name).capabilities.settings


def path_of(config: RunConfig, name: str, table: LiveTable | None = None) -> str:
    """Dotted config path of setting ``name`` in ``table`` (the run's: ``table_of``) or PLANNED; KeyError when
    neither has it."""
    setting = (table or table_of(config)).get(name)
    if setting is not None:
        return setting.path
    return PLANNED[name]


def _get(data: Any, path: str) -> Any:
    for part in path.split("."):
        data = getattr(data, part)
    return data


def value_of(config: RunConfig, name: str, table: LiveTable | None = None) -> Any:
    """The current value of setting ``name`` in ``config``."""
    return _get(config, path_of(config, name, table))


def with_settings(config: RunConfig, table: LiveTable | None = None, **settings) -> RunConfig:
    """A validated copy of ``config`` with the given settings (None values leave a field alone)."""
    changes = {k: v for k, v in settings.items() if v is not None}
    if not changes:
        return config
    data = config.model_dump()
    for name, value in changes.items():
        node = data
        *parents, leaf = path_of(config, name, table).split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    return validate(data, "settings")


def written(config: RunConfig, changes: dict[str, Any], table: LiveTable | None = None) -> RunConfig:
    """``config`` with ``changes`` written at their paths, as they are: values the engine's door admitted
    (engine.core.live_table: the entries of the engine's own settings carry their fields' bounds, a task's
    declared bounds lie within its fields'), which nothing judges a second time."""
    for name, value in changes.items():
        config = _write(config, path_of(config, name, table).split("."), value)
    return config


def _write(node: Any, path: list[str], value: Any) -> Any:
    head, *rest = path
    return node.model_copy(update={head: _write(getattr(node, head), rest, value) if rest else value})


def task_values(config: RunConfig) -> dict[str, Any]:
    """Each declared task setting's current value, by name."""
    return {s.name: _get(config, s.path) for s in declared(config)}


def describe(config: RunConfig) -> dict:
    """The settings of ``config`` as a plain dict (what an Estimate's ``settings`` records)."""
    t = config.train
    return {
        "batch_size": t.batch_size,
        "grad_accum": t.grad_accum,
        "micro_batch": -(-t.batch_size // t.grad_accum),  # torch.chunk: the first micro-batch is the largest
        "precision": config.runtime.precision,
        **task_values(config),
    }
