"""The engine's own live settings (batch, grad_accum, peak LR, threads, data workers) as bounded Settings.

A live change must never reach a value the config file would refuse, so the
bounds are read from the config field's own constraints: ``set lr=1e308``
meets the same limit (``optimizer.lr <= 10``) as a TOML file. The engine enforces
them (engine.training.live_settings answers a Refused event), and the tune
modal shows them beside each field. Torch-free: the viewer imports this.
"""

from __future__ import annotations

import annotated_types as at

from engine.core.core_sections import OptimizerConfig, RuntimeConfig, TrainConfig
from engine.core.taskspec import Setting

#: The sections an engine setting lives in, by name.
_SECTIONS = {"train": TrainConfig, "optimizer": OptimizerConfig, "runtime": RuntimeConfig}


def _bounded(path: str, kind: str, label: str, help: str, affects_memory: bool = True) -> Setting:
    """The config field at ``path`` (``section.name``) as Setting ``name`` whose range is the field's
    ``ge``/``gt``/``le``."""
    section, _, name = path.partition(".")
    minimum = maximum = None
    exclusive = False
    for rule in _SECTIONS[section].model_fields[name].metadata:
        if isinstance(rule, at.Ge):
            minimum = rule.ge
        elif isinstance(rule, at.Gt):
            minimum, exclusive = rule.gt, True
        elif isinstance(rule, at.Le):
            maximum = rule.le
    return Setting(name, path, kind, minimum=minimum, maximum=maximum, minimum_exclusive=exclusive,
                   label=label, help=help, affects_memory=affects_memory)


#: The engine's own live settings, in the order a viewer lists them (the task's declared ones follow).
ENGINE_LIVE: tuple[Setting, ...] = (
    _bounded("train.batch_size", "int", "batch size", "samples per optimizer step (the effective batch)"),
    _bounded("train.grad_accum", "int", "grad accum", "micro-batches per optimizer step (at most the batch size)"),
    _bounded("optimizer.lr", "float", "learning rate", "peak learning rate (the schedule scales it)",
             affects_memory=False),
)
#: The engine's settings of how it runs, not what it trains: settable live (a ``set``, autotune) within the same
#: bounds, not listed by the tune modal (the thread plan chooses them; autotune measures them).
ENGINE_RUNTIME: tuple[Setting, ...] = (
    _bounded("runtime.threads", "int", "torch threads", "intra-op threads (0: planned from the usable cores)",
             affects_memory=False),
    _bounded("runtime.data_workers", "int", "data workers",
             "batch-building worker processes (0: one thread; -1: planned)", affects_memory=False),
)


def engine_setting(name: str) -> Setting | None:
    """The engine's own live setting called ``name``, if it is one."""
    return next((s for s in ENGINE_LIVE + ENGINE_RUNTIME if s.name == name), None)


#: The engine settings this machine bounds beyond their config limits: torch threads and data worker processes,
#: one per core the process may use at most. More only oversubscribe the cores (engine.training.threads: a
#: parallel region waits for its slowest thread), and each worker process holds torch (~250 MiB) for nothing;
#: `set data_workers=64` and `set threads=1024` on 2 cores were applied without a word.
PER_CORE = ("threads", "data_workers")


def machine_bound(name: str, cores: int) -> int | None:
    """The most setting ``name`` may be set to live where the process may use ``cores`` cores (the engine reads
    them: engine.training.threads.usable_cores); None when the machine does not bound it. The one place this
    bound is decided."""
    return cores if name in PER_CORE else None
