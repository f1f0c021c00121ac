"""The toy task as the registry sees it, torch-free: its section ``[toy]``, one preset, capabilities.

Flat on purpose: an MLP and a signal generator have few knobs. The section is what
engine/tasks/toy/task.py reads and what engine/tasks/toy/memory.py prices.
"""

from __future__ import annotations

from pydantic import Field

from engine.core.sections import MAX_SEED, MAX_VAL_SAMPLES, Section
from engine.core.taskspec import Capabilities, Metric, TaskSpec

#: Largest training set (each epoch's order is a permutation in memory; a 1e12 typo is a config error).
MAX_TRAIN_SAMPLES = 100_000_000


class ToyConfig(Section):
    """The MLP's shape and the synthetic signals it reconstructs."""

    dim: int = Field(128, ge=8, le=8192, description="Hidden width of the MLP.")
    depth: int = Field(2, ge=1, le=128, description="Hidden layers of the MLP.")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout between hidden layers (0 keeps runs bit-exact).")
    channels: int = Field(8, ge=1, le=64, description="Channels per signal.")
    length: int = Field(128, ge=1, le=10080, description="Time steps per signal.")
    train_samples: int = Field(100_000, ge=1, le=MAX_TRAIN_SAMPLES, description="Training signals (generated on "
                               "demand).")
    val_samples: int = Field(64, ge=1, le=MAX_VAL_SAMPLES, description="Validation signals, a fixed set disjoint "
                             "from training.")
    mask_ratio: float = Field(0.5, gt=0, lt=1, description="Fraction of time steps hidden for reconstruction.")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Seed of the signal generator (independent of train.seed).")


PRESETS: dict[str, dict] = {
    "demo": {
        "toy": {"dim": 128, "depth": 2, "channels": 8, "length": 128, "val_samples": 64},
        "train": {"batch_size": 32, "max_steps": 300}, "optimizer": {"lr": 3e-3}, "evaluation": {"every": 50},
    },
}

CAPABILITIES = Capabilities(
    primary=Metric("psnr_db", "PSNR", "dB", higher_is_better=True, kind="val"),
    curves=(Metric("mse", "mse", higher_is_better=False, kind="train"),
            Metric("val_loss", "val loss", higher_is_better=False)),
    settings=(),
    memory="analytic",
    eval_reduction="per_batch",
)

SPEC = TaskSpec(
    name="toy",
    config=ToyConfig,
    capabilities=CAPABILITIES,
    task="engine.tasks.toy.task:ToyTask",
    presets=PRESETS,
    default_preset="demo",
    analytic_memory="engine.tasks.toy.memory:ledger",
    summary="The engine's own tiny task: masked-signal reconstruction with an MLP (seconds on one core).",
)
