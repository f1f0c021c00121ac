"""The knobs the budget varies, applied to a RunConfig: the engine's own and the task's declared settings.

Torch-free. The engine owns ``batch_size``, ``grad_accum`` (in ``[train]``), ``precision``, ``threads``,
``data_workers`` (in ``[runtime]``) and ``lr`` (in ``[optimizer]``); every other name is one of the task's declared
``Setting``s (engine.core.taskspec), found at its ``path``. ``with_settings``
returns a validated copy, so a bad value is the config's own one-line error
naming the field.
"""

from __future__ import annotations

from typing import Any

from engine.core.config import RunConfig, validate

#: The engine's own settings → their dotted config path.
ENGINE = {
    "batch_size": "train.batch_size",
    "grad_accum": "train.grad_accum",
    "precision": "runtime.precision",
    "lr": "optimizer.lr",
    "threads": "runtime.threads",
    "data_workers": "runtime.data_workers",
}
#: Engine settings that move no memory the budget predicts (the LR; torch threads cost host memory outside the
#: training step's tensors). ``data_workers`` does move it: the batches they build ahead share a CPU run's memory
#: (engine.budget.ahead).
NO_MEMORY = ("lr", "threads")


def declared(config: RunConfig) -> tuple:
    """The task's declared live settings (engine.core.taskspec.Setting), in declaration order."""
    from engine.core.registry import get_spec

    return get_spec(config.task.name).capabilities.settings


def path_of(config: RunConfig, name: str) -> str:
    """Dotted config path of setting ``name``; KeyError when neither the engine nor the task has it."""
    if name in ENGINE:
        return ENGINE[name]
    for setting in declared(config):
        if setting.name == name:
            return setting.path
    raise KeyError(name)


def _get(data: Any, path: str) -> Any:
    for part in path.split("."):
        data = getattr(data, part)
    return data


def value_of(config: RunConfig, name: str) -> Any:
    """The current value of setting ``name`` in ``config``."""
    return _get(config, path_of(config, name))


def with_settings(config: RunConfig, **settings) -> RunConfig:
    """A validated copy of ``config`` with the given settings (None values leave a field alone)."""
    changes = {k: v for k, v in settings.items() if v is not None}
    if not changes:
        return config
    data = config.model_dump()
    for name, value in changes.items():
        node = data
        *parents, leaf = path_of(config, name).split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    return validate(data, "settings")


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
