"""The engine's own tiny task: masked-signal reconstruction with an MLP, scored by PSNR.

It exists to prove the engine without a large task: each sample is a sum
of a few sinusoids per channel (amplitudes in [-1, 1]); a random third of the
time steps is zeroed and the MLP must fill them in. Cheap enough to train 300
steps in seconds on one core, and it learns, so PSNR at the end beats the
untrained step-0 eval by a clear margin.

PSNR uses a fixed data range of 2.0 (signals live in [-1, 1]), computed per
sample on the masked positions and averaged.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from engine.tasks.protocol import Task, TaskError

#: Peak-to-peak range of the signals, the "MAX" of PSNR.
DATA_RANGE = 2.0
#: Validation samples come from indices above this, disjoint from training.
VAL_OFFSET = 10_000_000


class ToyMLP(nn.Module):
    """Reconstruct a (channels × length) signal from its masked version and the mask."""

    def __init__(self, channels: int, length: int, hidden: int, depth: int, dropout: float) -> None:
        super().__init__()
        size = channels * length
        layers: list[nn.Module] = [nn.Linear(2 * size, hidden), nn.GELU()]
        for _ in range(depth - 1):
            layers += [nn.Dropout(dropout), nn.Linear(hidden, hidden), nn.GELU()]
        layers.append(nn.Linear(hidden, size))
        self.net = nn.Sequential(*layers)
        self.shape = (channels, length)

    def forward(self, masked: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Prediction of the full signal, shape like ``masked``."""
        flat = torch.cat([masked.flatten(1), mask.flatten(1)], dim=1)
        return self.net(flat).view(-1, *self.shape)


class ToyTask(Task):
    """Masked-signal reconstruction; see the module docstring."""

    name = "toy"

    def __init__(self, config) -> None:
        super().__init__(config)
        #: The task's own section, ``[toy]``.
        self.cfg = config.task_config
        self.channels = self.cfg.channels
        self.length = self.cfg.length
        self.seed = self.cfg.seed
        self.mask_ratio = self.cfg.mask_ratio
        #: Test hook for fault injection (see engine.training.faults); None in normal runs.
        self.faults = None

    def setup(self, state: dict | None = None) -> None:
        """Refuse a data file: the toy task generates its signals, and silently ignoring --data misled users."""
        if self.config.data.path:
            raise TaskError(f"data.path={str(self.config.data.path)[:80]!r} (--data): the toy task generates its "
                            "own data and reads no file; drop --data, or train a task that reads files")

    def build_model(self) -> nn.Module:
        m = self.cfg
        return ToyMLP(self.channels, self.length, m.dim, m.depth, m.dropout)

    def shard_units(self, model: nn.Module) -> list:
        """FSDP2 units: the hidden layers, each its own (the root keeps the input and output layers, as a
        transformer's root keeps its embeddings and head), so the self-test task shards per block too."""
        return [m for m in model.net if isinstance(m, nn.Linear)][1:-1]

    def train_size(self) -> int:
        return self.cfg.train_samples

    def val_indices(self) -> list[int]:
        return [VAL_OFFSET + i for i in range(self.cfg.val_samples)]

    def _signal(self, index: int) -> np.ndarray:
        rng = np.random.default_rng((self.seed, index))
        t = np.arange(self.length, dtype=np.float64)[None, None, :]
        freq = rng.uniform(0.5, 4.0, size=(self.channels, 3, 1)) * 2 * math.pi / self.length
        phase = rng.uniform(0, 2 * math.pi, size=(self.channels, 3, 1))
        amp = rng.dirichlet(np.ones(3), size=self.channels)[..., None]
        return (amp * np.sin(freq * t + phase)).sum(axis=1).astype(np.float32)

    def make_batch(self, indices: Sequence[int], step: int, train: bool) -> dict[str, torch.Tensor]:
        signals = np.stack([self._signal(int(i)) for i in indices])
        masks = np.stack([self._mask(int(i), step if train else 0) for i in indices])
        target = torch.from_numpy(signals)
        mask = torch.from_numpy(masks)
        return {"target": target, "mask": mask, "masked": target * (1 - mask)}

    def _mask(self, index: int, step: int) -> np.ndarray:
        # Seeded by (sample, step) for training and by the sample alone for validation,
        # so the val number moves only when the model does.
        rng = np.random.default_rng((self.seed, index, step, 7))
        hidden = rng.random(self.length) < self.mask_ratio
        return np.broadcast_to(hidden, (self.channels, self.length)).astype(np.float32)

    def loss(self, model: nn.Module, batch: dict, step: int):
        prediction = model(batch["masked"], batch["mask"])
        mask = batch["mask"]
        # A mean of per-sample means, so micro-batches weighted by size add up to the full batch exactly.
        per_sample = (((prediction - batch["target"]) ** 2 * mask).flatten(1).sum(1)
                      / mask.flatten(1).sum(1).clamp(min=1))
        mse = per_sample.mean()
        if self.faults is not None:
            mse = self.faults.on_loss(step, mse)
        return mse, {"mse": mse.detach()}

    @torch.no_grad()
    def eval_batch(self, model: nn.Module, batch: dict) -> dict[str, float]:
        prediction = model(batch["masked"], batch["mask"])
        mask = batch["mask"]
        per_sample = (((prediction - batch["target"]) ** 2 * mask).flatten(1).sum(1)
                      / mask.flatten(1).sum(1).clamp(min=1))
        psnr = 10 * torch.log10(DATA_RANGE**2 / per_sample.clamp(min=1e-12))
        return {"val_loss": float(per_sample.mean()), "psnr_db": float(psnr.mean())}

    def describe(self) -> dict[str, Any]:
        return {"channels": self.channels, "length": self.length}
