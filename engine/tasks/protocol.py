"""The task protocol: everything the Trainer needs from a task, and nothing about what the task is.

A task owns its model, its data (a map-style training set indexed by sample
number, a fixed validation subset), its loss (a total plus named components)
and its validation metrics (``val_loss`` always, plus whatever its spec declares:
the primary metric and the curves, engine.core.taskspec.Capabilities). The loop
owns optimisation, schedule, checkpoints, controls and events.

Hooks with defaults: ``param_groups`` (which parameters train, in which
optimizer groups), ``export`` (artefacts besides checkpoints, e.g. an adapter),
``finalize_metrics`` (metrics derived from the reduced ones, e.g. perplexity).
With ``eval_reduction = "pooled"`` in the spec, ``eval_batch`` returns
``{name: (sum, count)}`` and the engine divides once over the whole set;
with "per_batch" it returns per-batch means, weighted by batch size.

Determinism contract: ``make_batch(indices, step, train)`` must be a pure
function of its arguments and the task's seed (masks drawn from a generator
seeded by sample index and step), so that resuming at a data position gives
bit-identical batches without replaying any RNG. The loop builds the next batch
on a background thread while a step trains (``engine.training.prefetch``; one build at a
time, beside evaluation on the main thread), so ``make_batch`` must not change
shared state either; a task that cannot promise that runs with ``runtime.prefetch = false``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Sequence

if TYPE_CHECKING:  # torch only for type names; this module is imported before torch is needed
    from pathlib import Path

    import torch
    from torch import nn

    from engine.core.config import RunConfig


class TaskError(ValueError):
    """Bad task input (data file, checkpoint from another shape, …); ``str()`` is a one-line message."""


class Task(ABC):
    """Base class every task derives from; see the module docstring for the contract."""

    #: Registry name of the task.
    name: ClassVar[str] = "task"

    def __init__(self, config: "RunConfig") -> None:
        self.config = config
        #: Test fault injector (engine.training.faults), attached by engine.core.registry.make_task; None in normal
        #: runs.
        #: A task's loss() should end with ``if self.faults is not None: loss = self.faults.on_loss(step, loss)``.
        self.faults = None

    # -- lifecycle -----------------------------------------------------------------
    def setup(self, state: dict | None = None) -> None:
        """Build datasets and task state (tokenizer, normalisation); ``state`` comes from a checkpoint."""
        return None

    @abstractmethod
    def build_model(self) -> "nn.Module":
        """A freshly initialised model (the loop seeds torch before calling this)."""

    def state_dict(self) -> dict:
        """JSON-able task state saved in every checkpoint (e.g. the tokenizer's vocabulary)."""
        return {}

    def describe(self) -> dict[str, Any]:
        """A few facts for the dashboard header and RunStarted (tokens, channels, …)."""
        return {}

    def tokens_per_sample(self) -> int:
        """Tokens one training sample holds, for tokens/s and MFU in the step events (engine.training.throughput);
        0: none."""
        return 0

    def flops_per_token(self, model: "nn.Module") -> float:
        """Training FLOPs (forward + backward) per token of ``model``, for MFU; 0: not counted."""
        return 0.0

    def model_source(self) -> str | None:
        """Where ``build_model`` takes weights that stay frozen from (a model directory, a random init's seed):
        recorded in checkpoints that leave those weights out (engine.checkpoint.weights), compared on resume."""
        return None

    # -- data ------------------------------------------------------------------------
    @abstractmethod
    def train_size(self) -> int:
        """Number of training samples (the loop permutes 0..n-1 per epoch)."""

    @abstractmethod
    def make_batch(self, indices: Sequence[int], step: int, train: bool) -> dict[str, "torch.Tensor"]:
        """CPU tensors for the given sample indices; deterministic in (indices, step, train)."""

    @abstractmethod
    def val_indices(self) -> list[int]:
        """The fixed, evenly spaced validation subset (indices into the validation set)."""

    # -- objective -------------------------------------------------------------------
    @abstractmethod
    def loss(self, model: "nn.Module", batch: dict, step: int) -> tuple["torch.Tensor", dict[str, "torch.Tensor"]]:
        """(total loss, named components) for one micro-batch; components are detached scalars."""

    @abstractmethod
    def eval_batch(self, model: "nn.Module", batch: dict) -> dict[str, Any]:
        """Validation metrics of one batch, ``val_loss`` included: per-batch means ("per_batch" reduction) or
        ``{name: (sum, count)}`` ("pooled"), as the spec's ``eval_reduction`` says."""

    # -- optimisation, metrics, exports ----------------------------------------------
    def param_groups(self, model: "nn.Module") -> list[dict]:
        """Optimizer param groups: every trainable parameter, matrices with weight decay, the rest without.

        A group may carry ``lr_mult``: its LR is the schedule's times that (default 1), e.g. LoRA+."""
        trainable = [p for p in model.parameters() if p.requires_grad]
        decay = self.config.optimizer.weight_decay
        return [{"params": [p for p in trainable if p.ndim >= 2], "weight_decay": decay},
                {"params": [p for p in trainable if p.ndim < 2], "weight_decay": 0.0}]

    def shard_units(self, model: "nn.Module") -> list:
        """The submodules FSDP2 shards one by one before the root (``--strategy fsdp2``): by default every
        element of every ``nn.ModuleList`` (transformer blocks); the root keeps the rest."""
        from torch import nn

        return [unit for module in model.modules() if isinstance(module, nn.ModuleList) for unit in module]

    def compile_units(self, model: "nn.Module") -> list:
        """The submodules ``runtime.compile = "blocks"`` compiles one by one: by default the units FSDP2 shards
        (``shard_units``), so the compiled graphs and the sharded units line up, as in torchtitan."""
        return self.shard_units(model)

    def finalize_metrics(self, means: dict[str, float]) -> dict[str, float]:
        """Validation metrics derived from the reduced means (e.g. perplexity = exp(val_loss)); default as is."""
        return means

    def export(self, model: "nn.Module", out_dir: "Path", kind: str) -> "Path | None":
        """Write an artefact besides checkpoints (e.g. a PEFT adapter) of ``kind``; default: none."""
        return None

    # -- live settings ---------------------------------------------------------------
    def apply_setting(self, model: "nn.Module", name: str, value: Any) -> None:
        """Change one of the spec's declared live settings on the model; raise TaskError if unsupported."""
        raise TaskError(f"task {self.name!r} does not support changing {name}")
