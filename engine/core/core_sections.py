"""The config sections every run has, whatever its task: task, data, train, optimizer, schedule, evaluation,
policies, runtime, checkpoint, budget, autotune.

Each field carries its bounds and a one-line description (the README's config
reference is generated from them). A task's own section is declared by its
spec (engine.tasks.<name>.spec) on the same strict base. Torch-free.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, Optional

from pydantic import Field, field_validator

from engine.core import registry
from engine.core.sections import MAX_SEED, Section

_Section = Section


#: An Adam beta: a decay rate in [0, 1) (torch raised "Invalid beta parameter" without naming the field).
Beta = Annotated[float, Field(ge=0.0, lt=1.0)]


class TaskConfig(_Section):
    """Which task trains, and with which preset."""

    name: str = Field(registry.DEFAULT_TASK, description="Task to train: a built-in task or an installed plugin "
                      "(`sensorlm-tui presets` lists them).")
    preset: str = Field("demo", description="Named preset the defaults start from (the task's own presets).")


class DataConfig(_Section):
    """Where the data comes from; what it looks like is the task's business (its own section)."""

    path: Optional[str] = Field(None, description="Data file or directory, in the task's format (none: the "
                                "task's synthetic data, where it has one).")


class TrainConfig(_Section):
    """What trains and for how long: the step count, the batch, the seed, how often a step is told."""

    max_steps: int = Field(300, ge=0, description="Optimizer steps to run (0 = use epochs × steps_per_epoch).")
    epochs: int = Field(1, ge=1, description="Epochs, when max_steps is 0.")
    steps_per_epoch: int = Field(0, ge=0, description="Steps per epoch (0 = one pass over the training set).")
    batch_size: int = Field(16, ge=1, le=1_000_000, description="Samples per optimizer step (the effective batch).")
    grad_accum: int = Field(1, ge=1, le=4096, description="Micro-batches per step; micro-batch = "
                            "batch_size/grad_accum.")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Seed of torch, numpy and python RNGs and the data order.")
    log_every: int = Field(1, ge=1, description="Write a step event every N steps.")
    print_every: int = Field(10, ge=1, description="Headless console: print a step line every N steps.")


class OptimizerConfig(_Section):
    """AdamW and the gradient clip (engine.optim.optimization)."""

    lr: float = Field(1e-3, gt=0, le=10, description="Peak learning rate.")
    betas: tuple[Beta, Beta] = Field((0.9, 0.999), description="AdamW betas.")
    eps: float = Field(1e-8, gt=0, le=1, description="AdamW epsilon.")
    weight_decay: float = Field(0.01, ge=0, le=10, description="AdamW decoupled weight decay.")
    clip_grad_norm: float = Field(1.0, ge=0, description="Clip the global grad norm to this (0 = off).")


class ScheduleConfig(_Section):
    """The learning-rate schedule over the run's steps (engine.optim.schedule)."""

    kind: Literal["constant", "cosine", "rsqrt", "onecycle"] = Field("cosine", description="LR schedule.")
    warmup_frac: float = Field(0.05, ge=0, lt=1, description="Fraction of steps of linear warm-up.")
    cooldown_frac: float = Field(0.1, ge=0, lt=1, description="rsqrt: fraction of steps of linear cool-down to 0.")
    min_lr_frac: float = Field(0.0, ge=0, le=1, description="cosine/onecycle: final LR as a fraction of "
                               "optimizer.lr.")


class EvaluationConfig(_Section):
    """When validation runs, and the overfit checks (engine.training.evaluator, overfit_gate)."""

    every: int = Field(50, ge=0, description="Evaluate every N steps (0 = only at start and end).")
    overfit: int = Field(0, ge=0, description="If > 0: train and validate on this many frozen samples (a sanity gate).")
    overfit_target: float = Field(0.1, gt=0, le=1, description="Overfit gate passes when final val loss <= this x "
                                  "the untrained one.")
    overfit_gate: int = Field(0, ge=0, le=1024, description="If > 0: before training, a copy of the model must "
                              "learn this many frozen samples (engine.training.overfit_gate) or the run stops, exit 1.")
    overfit_gate_steps: int = Field(300, ge=1, le=100_000, description="Steps the overfit gate trains its copy.")


class PoliciesConfig(_Section):
    """What the run does when something goes wrong: a metric that gets worse, NaN, OOM, a hang-up
    (engine.training.policies)."""

    abort_drop: float = Field(1.5, ge=0, description="Abort when the primary metric sits this much worse than its "
                              "best since the LR warm-up ended, in its own unit...")
    abort_patience: int = Field(2, ge=0, description="...on this many consecutive evals (0 = never abort)...")
    abort_patience_steps: int = Field(0, ge=0, le=10**12, description="...spanning at least this many steps...")
    abort_patience_s: float = Field(60.0, ge=0, le=10**7, description="...and at least this many seconds, so "
                                    "patience holds at any step rate (two evals 50 steps apart were 0.5 s).")
    nan_policy: Literal["skip", "rollback", "stop"] = Field(
        "rollback", description="After nan_patience consecutive non-finite steps: roll back to last good or stop.")
    nan_patience: int = Field(5, ge=1, description="Consecutive non-finite steps tolerated (each is skipped).")
    rollback_lr_factor: float = Field(0.5, gt=0, le=1, description="LR multiplier applied on a NaN rollback.")
    oom_recovery: bool = Field(True, description="On out-of-memory, halve the micro-batch and keep the effective "
                               "batch.")
    on_hangup: Literal["continue", "stop"] = Field("continue", description="SIGHUP: keep training, or checkpoint and "
                                                   "exit.")


class RuntimeConfig(_Section):
    """How the run executes, not what it computes: device, precision, threads and data workers, the strategy
    across ranks, compile, the step's readback."""

    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto picks CUDA when available.")
    precision: Literal["fp32", "bf16", "fp16"] = Field("fp32", description="fp32, bf16 autocast, or fp16 with a "
                                                       "grad scaler.")
    prefetch: bool = Field(True, description="Build the next batch on a background thread during the step "
                           "(off: every batch inline, for a task whose make_batch is not thread-safe).")
    data_workers: int = Field(-1, ge=-1, le=256, description="With prefetch: build batches in this many DataLoader "
                              "worker processes, two ahead each (0: one thread; -1: planned from the measured batch ÷ "
                              "step cost and the cores, engine.training.threads).")
    threads: int = Field(0, ge=0, le=1024, description="torch intra-op threads (0 = planned from the usable cores, "
                         "engine.training.threads).")
    strategy: Literal["ddp", "fsdp2"] = Field(
        "ddp", description="Across ranks: ddp (replicas; one checkpoint file) or fsdp2 (fully_shard; DCP "
        "checkpoint directories; without --nproc-per-node a world of 1). Fixed for the run's life.")
    step_readback: Literal["auto", "sync", "deferred"] = Field(
        "auto", description="How a step's loss and finiteness reach the host: sync (read before the optimizer "
        "step: one host sync a step), deferred (checked and skipped on the device, read one step later: no sync; "
        "needs fused AdamW), auto (deferred on CUDA where it can, sync elsewhere).")
    compile: Literal["off", "blocks", "model"] = Field(
        "off", description="torch.compile: off (eager), blocks (each block the task declares, compiled on its "
        "own: fast to compile) or model (the whole forward). Checkpoints and exports do not depend on it.")
    compile_backend: Literal["inductor", "aot_eager", "eager"] = Field(
        "inductor", description="torch.compile's backend with runtime.compile on: inductor generates kernels; "
        "aot_eager and eager only trace (for debugging a compile problem).")
    collective_timeout_s: float = Field(
        300.0, ge=1, le=86_400, description="Across ranks: seconds a collective waits for a stuck rank before the "
        "job stops and names the hang (exit 3).")


class CheckpointConfig(_Section):
    """When and what to checkpoint."""

    every_steps: int = Field(100, ge=0, description="Write `last` every N steps (and at every eval); 0 = evals only.")
    keep_last: int = Field(0, ge=0, description="Also keep this many step-N checkpoints (0 = none; fsdp2, "
                           "where every save is a step-N directory: the newest max(2, keep_last) stay).")
    save_best: bool = Field(True, description="Write `best` when the primary metric improves.")


class BudgetConfig(_Section):
    """Memory budget the guard and the tuning screen plan against."""

    vram_gb: Optional[float] = Field(None, gt=0, le=100_000, description="Budget in GiB (default: device free memory).")
    safety: float = Field(0.9, gt=0, le=1, description="Fraction of the budget a plan may use.")
    check: bool = Field(True, description="Refuse to start a run predicted not to fit (--no-vram-check disables).")


#: One ``autotune.settings`` entry: a setting's name, or name=value|value (the values to try).
_TUNE_ENTRY = re.compile(r"[a-z][a-z0-9_]{0,63}(=[^=|]{1,64}(\|[^=|]{1,64})*)?")


class AutotuneConfig(_Section):
    """The live search for the fastest settings that fit (engine.training.autotune)."""

    on_start: bool = Field(False, description="Autotune once the run is past its first steps (train --autotune); "
                           "the dashboard key and the `autotune` control start it at any time.")
    settings: list[str] = Field([], max_length=64, description="Settings to vary, each a name or name=value|value "
                                "to try only those (empty: every one that keeps the run's math: the micro-batch where "
                                "accumulation is exact, the task's declared kernel and memory settings, torch "
                                "threads, data workers).")
    @field_validator("settings")
    @classmethod
    def _entries(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            if not _TUNE_ENTRY.fullmatch(entry):
                raise ValueError(f"autotune.settings: {entry[:80]!r} is not a setting name (lower-case letters, "
                                 "digits, _) or name=value|value")
        return entries

    warmup_steps: int = Field(2, ge=0, le=1000, description="Steps after each change that are not timed (new "
                              "shapes, allocator, workers starting; longer while the step time still settles).")
    window_steps: int = Field(6, ge=2, le=10_000, description="Steps timed per candidate (their spread is the "
                              "noise a candidate must beat).")
    max_candidates: int = Field(24, ge=1, le=1000, description="Most candidates measured in one search.")
