"""The `ones` task as the registry sees it, torch-free: its section ``[ones]``, a preset, its capabilities."""

from __future__ import annotations

from pydantic import Field

from sensorlm_tui.plugin import Capabilities, Metric, Section, TaskSpec


class OnesConfig(Section):
    """Bit vectors and the MLP that counts their ones."""

    bits: int = Field(16, ge=1, le=4096, description="Length of each bit vector.")
    hidden: int = Field(32, ge=1, le=8192, description="Hidden width of the MLP.")
    train_samples: int = Field(10_000, ge=1, le=10_000_000, description="Training vectors (generated on demand).")
    val_samples: int = Field(64, ge=1, le=100_000, description="Validation vectors (a fixed set).")
    seed: int = Field(0, ge=0, description="Seed of the vector generator.")


SPEC = TaskSpec(
    name="ones",
    config=OnesConfig,
    capabilities=Capabilities(
        primary=Metric("mae", "mean abs error", "pp", higher_is_better=False, kind="val"),
        curves=(Metric("mse", "mse", higher_is_better=False, kind="train"),
                Metric("val_loss", "val loss", higher_is_better=False)),
        memory="traced",
        eval_reduction="per_batch",
    ),
    task="plugin_task.task:OnesTask",
    presets={"demo": {"ones": {"bits": 16, "hidden": 32}, "train": {"batch_size": 16, "max_steps": 200},
                      "optimizer": {"lr": 3e-3}, "evaluation": {"every": 50}}},
    default_preset="demo",
    analytic_memory=None,
    summary="Example plugin: the fraction of ones in a bit vector, scored by mean absolute error.",
)
