"""The run's live knobs: batch size, grad_accum, the peak LR, threads, data workers, the task's declared settings.

A viewer's ``set``, autotune and the OOM policy change these between steps.
Which knobs there are, their bounds, which move memory and who takes a
change is the run's live table (engine.core.live_table), read here, never
listed. ``admit`` is the engine's door: every value a socket request, an
in-process viewer or autotune asks for is checked there once (the table's
check, and the bounds the run's state sets: the batch size, this machine's
cores); what passes is written as it is.

The batch size counts samples per optimizer step and the sample order counts
samples, so a change neither replays nor skips one. ``config`` is kept in
step with every change (it is what a checkpoint records and what the memory
budget predicts from: ``engine.budget.hook`` reads ``config``, ``batch_size``
and ``grad_accum`` here).
"""

from __future__ import annotations

import math
from typing import Any

from engine.budget.settings import table_of, value_of, with_settings, written
from engine.core.config import RunConfig
from engine.core.live_table import LiveTable
from engine.training.threads import usable_cores


class LiveSettings:
    """Checks and applies live changes for one run (``optim`` holds the LR, ``task``/``model`` the task's own)."""

    def __init__(self, config: RunConfig, task, model, optim, table: LiveTable | None = None) -> None:
        """``table``: the run's live settings (default: the engine's and the task's declared ones)."""
        self.config, self.task, self.model, self.optim = config, task, model, optim
        self.table = table or table_of(config)
        self.batch_size, self.grad_accum = config.train.batch_size, config.train.grad_accum
        #: What the run started with of the settings the cores bound: a return to it is never refused (autotune's
        #: restore, a cancel), whatever the machine.
        self._started = {s.name: self.value(s.name) for s in self.table.entries if s.per_core}

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
        return self.table.affects_memory(name)

    def affects_data(self, name: str) -> bool:
        """True when the task's batches depend on ``name`` (a task setting's declaration says)."""
        setting = self.table.get(name)
        return setting is not None and setting.applies == "task" and setting.affects_data

    def admit(self, changes: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """The engine's door: ``changes`` checked as one change against the run's table, each value in its
        setting's type: (admitted, None) or ({}, why). Every submitter reaches it: the control socket, an
        in-process viewer, a test's Controls, autotune."""
        unknown = next((name for name in changes if self.table.get(name) is None), None)
        if unknown is not None:
            return {}, (f"task {self.config.task.name!r} has no setting {unknown!r}; settable: "
                        f"{', '.join(self.table.names())}")
        entries = [self.table.get(name) for name in changes]
        bounding = {s.at_most: self.value(s.at_most) for s in entries if s.at_most}  # the batch size, for grad_accum
        cores = usable_cores() if any(s.per_core for s in entries) else None
        return self.table.admit(changes, bounding, cores, self._started)

    def change(self, name: str, value: Any) -> tuple[Any, str]:
        """Apply an admitted change; (old value, a note for the acknowledgement)."""
        applies = self.table.get(name).applies
        old = self.value(name)
        if applies == "optimizer":  # the optimizer's, not the config's: a checkpoint records it there
            self.optim.peak_lr = value
            return old, ""
        if applies == "task":
            self.task.apply_setting(self.model, name, value)
        elif applies == "step":  # the batch or its accumulation; at most one micro-batch per sample
            setattr(self, name, value)
            self.grad_accum = min(self.grad_accum, self.batch_size)
        self._sync({name: value})
        return old, "data position kept: no sample replayed or skipped" if name == "batch_size" else ""

    def value(self, name: str) -> Any:
        """The current value of setting ``name`` (the engine's or the task's)."""
        applies = self.table.get(name).applies
        if applies == "optimizer":
            return self.optim.peak_lr
        if applies == "step":
            return getattr(self, name)
        return value_of(self.config, name, self.table)

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
        self.config = written(self.config, {**changed, "batch_size": self.batch_size, "grad_accum": self.grad_accum},
                              self.table)

    def state_dict(self) -> dict:
        """``{"batch_size", "grad_accum"}`` (the LR is the optimizer's, the task's settings are in the config)."""
        return {"batch_size": self.batch_size, "grad_accum": self.grad_accum}

    def load_state_dict(self, state: dict) -> None:
        """Continue with a checkpoint's batch size and accumulation (a file's values: the config validates them)."""
        self.batch_size, self.grad_accum = state["batch_size"], state["grad_accum"]
        self.config = with_settings(self.config, batch_size=self.batch_size, grad_accum=self.grad_accum)
