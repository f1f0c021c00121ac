"""The run's live settings, one table: the engine's own entries, then the task's declared ones, each a Setting.

An entry (engine.core.taskspec.Setting) says everything a view needs: the
name, the kind and bounds (read here from the config field's own
constraints, so ``set lr=1e308`` meets the limit a TOML file meets), the
config path, whether a change moves memory (the budget judges it) or the
task's data (worker processes restart), who takes the change (``applies``),
what autotune tries (``autotune``), whether the tune modal lists it, and the
bounds this machine or another setting adds (``per_core``, ``at_most``). A
task's declared settings are entries of the same shape, so every view treats
engine and task settings alike. The views are derived from a ``LiveTable``,
never listed again:

- the tune modal's fields (tui.screens.tune: ``tune_modal``);
- the engine's door (``admit``): every value a viewer, the control socket or
  autotune asks for is checked here once, in the training loop's control
  handler (engine.training.live_settings), the one place every submitter
  reaches; the wire checks only that a request is well formed;
- the budget's paths and the settings it judges (engine.budget.settings,
  ``affects_memory``);
- autotune's dimensions (engine.training.autotune_space);
- the control handler's dispatch and its application (``applies``).

Torch-free: the viewer imports this.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Protocol

import annotated_types as at

from engine.core.core_sections import OptimizerConfig, RuntimeConfig, TrainConfig
from engine.core.taskspec import Capabilities, Setting

#: The sections an engine setting lives in, by name.
_SECTIONS = {"train": TrainConfig, "optimizer": OptimizerConfig, "runtime": RuntimeConfig}


def _field(path: str, kind: str, **entry: Any) -> Setting:
    """The config field at ``path`` (``section.name``) as the entry called ``name``, its range the field's
    ``ge``/``gt``/``le`` (one rule: the config's)."""
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
    return Setting(name, path, kind, minimum=minimum, maximum=maximum, minimum_exclusive=exclusive, affects_data=False,
                   **entry)


#: The engine's own live settings, in the order the tune modal lists them (the task's declared ones follow).
#: The batch and the LR change what is trained on (``keeps_math`` False); the data workers' batches built ahead
#: share a CPU run's memory (engine.budget.ahead), torch threads hold none the budget predicts.
ENGINE_SETTINGS: tuple[Setting, ...] = (
    _field("train.batch_size", "int", label="batch size", help="samples per optimizer step (the effective batch)",
           applies="step", autotune="", keeps_math=False),
    _field("train.grad_accum", "int", label="grad accum", help="micro-batches per step (at most the batch size)",
           applies="step", autotune="micro_batches", at_most="batch_size"),
    _field("optimizer.lr", "float", label="learning rate", help="peak learning rate (the schedule scales it)",
           applies="optimizer", autotune="", keeps_math=False, affects_memory=False),
    _field("runtime.threads", "int", label="torch threads", help="intra-op threads (0: planned from the usable cores)",
           applies="batch_source", autotune="cores", affects_memory=False, tune_modal=False, per_core=True),
    _field("runtime.data_workers", "int", label="data workers",
           help="batch-building worker processes (0: one thread; -1: planned)", applies="batch_source",
           autotune="workers", tune_modal=False, per_core=True),
)


class Cores(Protocol):
    """The cores the engine may use (engine.training.threads.Cores)."""

    usable: int

    def describe(self) -> str:
        """Where the count comes from, in a few words."""


@dataclass(frozen=True)
class LiveTable:
    """The live settings of a run (the engine's, then its task's) and the views every component derives."""

    entries: tuple[Setting, ...]
    #: False when the task's loss couples a batch's samples: a micro-batch search changes its math.
    exact_accumulation: bool = True
    _by_name: dict[str, Setting] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {s.name: s for s in self.entries})

    def for_task(self, caps: Capabilities) -> LiveTable:
        """This table followed by the task's declared settings (one re-declaring an engine name is ignored)."""
        own = tuple(replace(s, applies="task") for s in caps.settings if s.name not in self._by_name)
        return LiveTable(self.entries + own, caps.exact_accumulation)

    def get(self, name: str) -> Setting | None:
        """The entry called ``name``, if the run has it."""
        return self._by_name.get(name)

    def names(self) -> tuple[str, ...]:
        """Every settable name, in table order."""
        return tuple(self._by_name)

    def tune_modal(self) -> tuple[Setting, ...]:
        """The tune modal's fields, in table order."""
        return tuple(s for s in self.entries if s.tune_modal)

    def affects_memory(self, name: str) -> bool:
        """True when the budget judges a change of ``name`` (False for a name the run does not have)."""
        setting = self._by_name.get(name)
        return setting is not None and setting.affects_memory

    def keeps_math(self, setting: Setting) -> bool:
        """True when autotune may vary ``setting`` without being asked by name (the micro-batch only where the
        task's accumulation is exact)."""
        return setting.keeps_math and (setting.autotune != "micro_batches" or self.exact_accumulation)

    def admit(self, changes: Mapping[str, Any], now: Mapping[str, Any], cores: Cores | None = None,
              started: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], str | None]:
        """The door: ``changes`` checked as one change, each value in its setting's type: (admitted, None), or
        ({}, the first one-line reason). ``now``: the values in force (a bound set by another setting reads
        its new value when it changes too); ``cores``: where the engine runs (None: no machine bound, the
        viewer's pre-check); ``started``: the values the run started with (a return to one is never refused)."""
        admitted: dict[str, Any] = {}
        for name, value in changes.items():
            setting = self._by_name.get(name)
            if setting is None:
                return {}, f"no setting {name!r}; settable: {', '.join(self._by_name)}"
            admitted[name], why = setting.admit(value)
            if why:
                return {}, why
        after = {**now, **admitted}
        for name, value in admitted.items():
            why = _live_bound(self._by_name[name], value, after, self._by_name, cores, started or {})
            if why:
                return {}, why
        return admitted, None


def _live_bound(setting: Setting, value: Any, after: Mapping[str, Any], table: Mapping[str, Setting],
                cores: Cores | None, started: Mapping[str, Any]) -> str | None:
    """Why ``value`` is past a bound the run's state sets (another setting's value, this machine's cores)."""
    low = setting.range_text().partition("..")[0]
    other = after.get(setting.at_most) if setting.at_most else None
    if isinstance(other, (int, float)) and value > other:
        what = table[setting.at_most].label or setting.at_most
        return f"{setting.name} {value} is out of range; allowed: {low}..{other} (at most the {what})"
    if setting.per_core and cores is not None and value > cores.usable and value != started.get(setting.name):
        return (f"{setting.name} {value} is out of range on this machine; allowed: {low}..{cores.usable} "
                f"(one per usable core: {cores.describe()})")
    return None


#: The engine's entries alone; a run's table is ``ENGINE.for_task(its task's capabilities)``.
ENGINE = LiveTable(ENGINE_SETTINGS)
