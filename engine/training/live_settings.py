"""The run's live knobs: batch size, grad_accum, the peak LR, threads, data workers, the task's declared settings.

A viewer's ``set`` and the OOM policy change these between steps. The batch
size counts samples per optimizer step and the sample order counts samples, so
a change neither replays nor skips one. ``config`` is kept in step with every
change (it is what a checkpoint records and what the memory budget predicts
from: ``engine.budget.hook`` reads ``config``, ``batch_size`` and ``grad_accum``
here). Which changes the budget judges: those the budget's settings map
(the engine's and the task's declared settings) knows; the LR costs no memory.
"""

from __future__ import annotations

import math
from typing import Any

from engine.budget.settings import ENGINE, NO_MEMORY, declared, value_of, with_settings
from engine.core.config import RunConfig
from engine.core.live_bounds import PER_CORE, engine_setting, machine_bound
from engine.run.control.requests import ENGINE_SETTINGS
from engine.training.threads import usable_cores


class LiveSettings:
    """Checks and applies live changes for one run (``optim`` holds the LR, ``task``/``model`` the task's own)."""

    def __init__(self, config: RunConfig, task, model, optim) -> None:
        self.config, self.task, self.model, self.optim = config, task, model, optim
        self.batch_size, self.grad_accum = config.train.batch_size, config.train.grad_accum
        #: What the run started with of the settings the cores bound: a return to it is never refused (autotune's
        #: restore, a cancel), whatever the machine.
        self._started = {name: value_of(config, name) for name in PER_CORE}

    @property
    def micro_batch(self) -> int:
        """Samples per micro-batch (the first, largest one)."""
        return max(1, math.ceil(self.batch_size / self.grad_accum))

    @property
    def optimizer(self):
        """The torch optimizer (the budget's CPU meter counts its state as held across steps)."""
        return self.optim.optimizer

    def affects_memory(self, name: str) -> bool:
        """True when the budget judges a change of ``name``."""
        return name not in NO_MEMORY and (name in ENGINE or any(s.name == name and s.affects_memory
                                                              for s in declared(self.config)))

    def affects_data(self, name: str) -> bool:
        """True when the task's batches depend on ``name`` (its declaration says; undeclared: assumed so)."""
        setting = next((s for s in declared(self.config) if s.name == name), None)
        return setting is None or setting.affects_data

    def error(self, name: str, value: Any) -> str | None:
        """Why ``value`` is not allowed for ``name``, before the budget's check; None when it is.

        Every setting has declared bounds (the engine's own in engine.core.live_bounds,
        the task's in its spec), checked here for every submitter: the control
        socket, an in-process viewer, a test's Controls, autotune. Threads and data
        workers are bounded by this machine's usable cores too (``machine_bound``).
        """
        setting = engine_setting(name) or next((s for s in declared(self.config) if s.name == name), None)
        if setting is None:
            names = ", ".join([*ENGINE_SETTINGS, *(s.name for s in declared(self.config))])
            return f"task {self.config.task.name!r} has no setting {name!r}; settable: {names}"
        why = setting.check(value)
        if why is None and name == "grad_accum" and value > self.batch_size:
            why = f"grad_accum {value} is out of range; allowed: 1..{self.batch_size} (at most the batch size)"
        if why is None and name in PER_CORE and value != self._started[name]:
            cores = usable_cores()
            bound = machine_bound(name, cores.usable)
            if value > bound:
                why = (f"{name} {value} is out of range on this machine; allowed: {setting.minimum}..{bound} "
                       f"(one per usable core: {cores.describe()})")
        return why

    def change(self, name: str, value: Any) -> tuple[Any, str]:
        """Apply a checked change; (old value, a note for the acknowledgement)."""
        if name == "lr":
            old, self.optim.peak_lr = self.optim.peak_lr, value
            return old, ""
        old = self.batch_size if name == "batch_size" else self.value(name)
        if name not in ENGINE_SETTINGS:
            self.task.apply_setting(self.model, name, value)
        if name == "batch_size":
            self.batch_size, self.grad_accum = value, min(self.grad_accum, value)
        elif name == "grad_accum":
            self.grad_accum = value
        self._sync({name: value} if name != "lr" else {})
        return old, "data position kept: no sample replayed or skipped" if name == "batch_size" else ""

    def value(self, name: str) -> Any:
        """The current value of setting ``name`` (the engine's or the task's)."""
        if name == "lr":
            return self.optim.peak_lr
        if name in ("batch_size", "grad_accum"):
            return getattr(self, name)
        return value_of(self.config, name)

    def smaller_micro_batches(self, grad_accum: int) -> str:
        """Out of memory: more, smaller micro-batches, the effective batch kept; returns the line that says so."""
        micro = self.micro_batch
        self.grad_accum = grad_accum
        self._sync({})
        return (f"out of memory: micro-batch {micro} -> {self.micro_batch}, effective batch {self.batch_size} "
                "kept")

    def searched(self) -> None:
        """An autotune search ended: the config (what checkpoints and config.toml record) no longer asks for one at
        the start, so a resumed run continues with the result instead of searching again."""
        self.config = self.config.model_copy(update={"autotune": self.config.autotune.model_copy(
            update={"on_start": False})})

    def _sync(self, changed: dict) -> None:
        self.config = with_settings(self.config, **{**changed, "batch_size": self.batch_size,
                                                    "grad_accum": self.grad_accum})

    def state_dict(self) -> dict:
        """``{"batch_size", "grad_accum"}`` (the LR is the optimizer's, the task's settings are in the config)."""
        return {"batch_size": self.batch_size, "grad_accum": self.grad_accum}

    def load_state_dict(self, state: dict) -> None:
        """Continue with a checkpoint's batch size and accumulation."""
        self.batch_size, self.grad_accum = state["batch_size"], state["grad_accum"]
        self._sync({})
