"""Helpers for the gap-filler's tests: the tiny data set's parameters and a config object.

Until the task registry exposes ``config.task_config``, a test config is a
namespace with ``task_config`` (the [gapfill] section), ``train`` and ``data``.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from engine.core.core_sections import OptimizerConfig, TrainConfig
from engine.tasks.gapfill.spec import GapfillConfig

#: The tiny data set every test shares: 16 px, 5 days (day 5 validates), 2-hour cadence, 1 instrument.
TINY = {"days": 5, "val_every": 5, "size": 16, "cadence_minutes": 120, "instruments": 1, "noise": 0.02, "seed": 0}


def make_config(data_path=None, **sections):
    """A config object as the engine hands tasks: task_config, train, data (with data.path)."""
    gap = {"synthetic": TINY, "model": {"base": 8, "depth": 1},
           "samples": {"neighbours": 2, "short_max": 2, "long_min": 4, "long_max": 12, "max_hours": 48,
                       "val_samples": 8}}
    for key, value in sections.pop("gapfill", {}).items():
        gap[key] = {**gap.get(key, {}), **value}
    train, optimizer = TrainConfig(**sections.pop("train", {})), OptimizerConfig(**sections.pop("optimizer", {}))
    return SimpleNamespace(task_config=GapfillConfig.model_validate(gap), train=train, optimizer=optimizer,
                           data=SimpleNamespace(path=str(data_path) if data_path else None))


#: The tiny data set's sample shape and a tiny U-Net, as a TOML file for engine runs.
TOML = """
[gapfill.model]
base = 8
depth = 1

[gapfill.samples]
neighbours = 2
short_max = 2
long_min = 4
long_max = 12
max_hours = 48
val_samples = 8
"""


def cli_flags(tmp_path: Path, data: Path, *more: str) -> list[str]:
    """`train` flags for a headless gap-filler run on ``data`` with TOML's tiny model, batch 4, one thread."""
    config = tmp_path / "gapfill.toml"
    config.write_text(TOML)
    return ["train", "--task", "gapfill", "--headless", "--threads", "1", "--config", str(config),
            "--set", f"data.path={data}", "--batch-size", "4", *more]
