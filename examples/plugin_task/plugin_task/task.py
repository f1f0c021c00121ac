"""The `ones` Task: random bit vectors (pure functions of seed and index), an MLP, MSE loss, MAE in points.

Validation metrics are per-sample means (``eval_reduction = "per_batch"``): the engine weights each
batch's means by its size, which is exact for them.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import nn

from sensorlm_tui.plugin import Task

#: Validation vectors come from indices above this, disjoint from training.
VAL_OFFSET = 1 << 40


class OnesTask(Task):
    """Regress the fraction of ones (0..1); report the mean absolute error in percentage points."""

    name = "ones"

    def __init__(self, config) -> None:
        super().__init__(config)
        self.cfg = config.task_config

    def build_model(self) -> nn.Module:
        c = self.cfg
        return nn.Sequential(nn.Linear(c.bits, c.hidden), nn.GELU(), nn.Linear(c.hidden, 1))

    def train_size(self) -> int:
        return self.cfg.train_samples

    def val_indices(self) -> list[int]:
        return [VAL_OFFSET + i for i in range(self.cfg.val_samples)]

    def make_batch(self, indices: Sequence[int], step: int, train: bool) -> dict[str, torch.Tensor]:
        bits = np.stack([np.random.default_rng((self.cfg.seed, int(i))).integers(0, 2, self.cfg.bits)
                         for i in indices]).astype(np.float32)
        return {"x": torch.from_numpy(bits), "y": torch.from_numpy(bits.mean(axis=1, keepdims=True))}

    def loss(self, model: nn.Module, batch: dict, step: int):
        mse = ((model(batch["x"]) - batch["y"]) ** 2).mean()
        if self.faults is not None:
            mse = self.faults.on_loss(step, mse)
        return mse, {"mse": mse.detach()}

    @torch.no_grad()
    def eval_batch(self, model: nn.Module, batch: dict) -> dict:
        error = model(batch["x"]) - batch["y"]
        return {"val_loss": float((error ** 2).mean()), "mae": float(error.abs().mean()) * 100}
