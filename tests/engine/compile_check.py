"""The shared check of every task's compile test: train a few steps eager and compiled, in-process, side by side.

Each task's test builds its own config (its folder knows its data) and asks ``compare`` for both runs; the
assertions on losses, events and exports stay in the task's test, with the tolerance it states.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from engine.core.config import RunConfig
from engine.run.sinks import EventBus
from engine.training.loop import Trainer


@dataclass
class Run:
    """One in-process run: its trainer (model, task), every event, the losses of its logged steps."""

    trainer: Trainer
    events: list = field(default_factory=list)

    @property
    def losses(self) -> dict[int, float]:
        return {e.step: e.loss for e in self.events if e.type == "step" and not e.skipped}

    def of(self, kind: str) -> list:
        return [e for e in self.events if e.type == kind]


def train(config: RunConfig, checkpoint_dir: Path | None = None, resume=None, on_step=None, controls=None) -> Run:
    """``config`` trained to its max_steps in this process (one torch thread, the inline batch builder)."""
    torch.set_num_threads(1)
    events: list = []
    trainer = Trainer(config, EventBus([events.append]), controls, checkpoint_dir=checkpoint_dir, resume=resume,
                      on_step=on_step)
    outcome = trainer.run()
    assert outcome.status == "finished", outcome
    return Run(trainer, events)


def with_compile(config: RunConfig, mode: str, backend: str) -> RunConfig:
    """``config`` with ``runtime.compile`` / ``runtime.compile_backend`` set."""
    runtime = config.runtime.model_copy(update={"compile": mode, "compile_backend": backend})
    return config.model_copy(update={"runtime": runtime})


def compare(config: RunConfig, mode: str, backend: str) -> tuple[Run, Run]:
    """(eager run, compiled run) of ``config``."""
    return train(with_compile(config, "off", backend)), train(with_compile(config, mode, backend))


def assert_close(eager: dict[int, float], compiled: dict[int, float], rel: float) -> None:
    """The same steps, each loss within ``rel`` of eager's."""
    assert sorted(compiled) == sorted(eager)
    for step, value in eager.items():
        assert abs(compiled[step] - value) <= rel * abs(value), (step, value, compiled[step])
