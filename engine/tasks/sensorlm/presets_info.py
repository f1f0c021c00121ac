"""Parameter counts of the SensorLM presets, without allocating their weights (built on the meta device)."""

from __future__ import annotations

import torch

from engine.core.config import load
from engine.tasks.sensorlm.model import build
from engine.tasks.sensorlm.spec import PRESETS


def param_count(preset: str) -> int:
    """Trainable parameters of one ``sensorlm`` preset (the model shape only; no data is read)."""
    section = load(preset=preset, task="sensorlm").task_config
    with torch.device("meta"):  # shapes only: a 200M-parameter preset costs no memory and ~10 ms
        model = build(section.model, section.data.channels, section.data.minutes)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def param_counts() -> dict[str, int]:
    """preset name → parameter count, for every ``sensorlm`` preset in engine.tasks.sensorlm.spec."""
    return {name: param_count(name) for name in PRESETS}


if __name__ == "__main__":  # python -m engine.tasks.sensorlm.presets_info
    for name, n in param_counts().items():
        print(f"{name:6s} {n / 1e6:8.2f} M")
