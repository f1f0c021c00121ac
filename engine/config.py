"""Run configuration: pydantic v2 models, TOML loading, presets and CLI overrides.

Precedence, lowest first: field defaults → the task's preset → the TOML file
(``--config``) → CLI flags. The resolved config is written to the run
directory as ``config.toml`` and is what ``--resume`` reads back.

Every error is a ``ConfigError`` whose message is one line naming the place
(``file:line``, ``field`` or ``--flag``), the value and what is allowed.
Torch-free.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from engine.presets import PRESETS


#: Largest seed: torch.manual_seed takes a signed 64-bit value at most (2**64 raised OverflowError mid-setup).
MAX_SEED = 2**63 - 1
#: Most validation samples: every eval runs them all (10**12 was accepted and never finished an eval).
MAX_VAL_SAMPLES = 1_000_000
#: An Adam beta: a decay rate in [0, 1) (torch raised "Invalid beta parameter" without naming the field).
Beta = Annotated[float, Field(ge=0.0, lt=1.0)]


class ConfigError(ValueError):
    """A bad configuration value; ``str()`` is the one-line message for the user."""


class _Section(BaseModel):
    """Strict base: unknown keys are errors and values are re-validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info) -> Any:
        # Lax mode would read `batch_size = true` as 1; a boolean where a number belongs is a mistake.
        if isinstance(value, bool):
            annotation = cls.model_fields[info.field_name].annotation
            if annotation in (int, float) or (annotation is not bool and float in getattr(annotation, "__args__", ())):
                raise PydanticCustomError("bool_not_number", "expected a number, not true/false")
        return value


class TaskConfig(_Section):
    """Which task trains, and with which preset."""

    name: str = Field("sensorlm", description="Task to train: a name in engine.tasks.TASKS.")
    preset: str = Field("demo", description="Named preset the defaults start from (demo, tiny, small, base).")


class ModelConfig(_Section):
    """Model shape. Transformer-shaped fields shared by tasks; a task ignores what it has no use for."""

    dim: int = Field(64, ge=8, le=8192, description="Width of the sensor encoder (tokens' embedding size).")
    depth: int = Field(2, ge=1, le=128, description="Number of sensor-encoder blocks.")
    heads: int = Field(4, ge=1, le=128, description="Attention heads per block; must divide dim.")
    mlp_ratio: float = Field(4.0, gt=0, le=16, description="MLP hidden width as a multiple of dim.")
    patch_time: int = Field(60, ge=1, le=1440, description="Patch length along time, in minutes.")
    patch_channels: int = Field(4, ge=1, le=64, description="Patch height across channels.")
    text_dim: int = Field(64, ge=8, le=8192, description="Width of the text encoder and caption decoder.")
    text_depth: int = Field(1, ge=1, le=64, description="Text-encoder blocks.")
    decoder_depth: int = Field(1, ge=1, le=64, description="Caption-decoder blocks (self- + cross-attention).")
    text_heads: int = Field(4, ge=1, le=128, description="Attention heads in the text side; must divide text_dim.")
    max_caption_tokens: int = Field(48, ge=4, le=1024, description="Caption length in tokens (padded/truncated).")
    vocab_size: int = Field(2048, ge=16, le=262144, description="Upper bound on the tokenizer's vocabulary.")
    embed_dim: int = Field(64, ge=8, le=4096, description="Shared sensor/text embedding size for the contrastive loss.")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout probability in blocks (0 keeps runs bit-exact).")
    attn_backend: Literal["sdpa", "math", "chunked"] = Field(
        "sdpa", description="sdpa: fused scaled_dot_product_attention; math: explicit softmax(QK^T)V; "
        "chunked: query chunks of attn_chunk rows, recomputed in backward.")
    attn_chunk: int = Field(256, ge=1, le=65536, description="Query rows per chunk for attn_backend=chunked.")
    activation_checkpointing: bool = Field(False, description="Recompute each block in backward to save memory.")
    contrastive: Literal["infonce", "siglip"] = Field(
        "infonce", description="Contrastive loss: infonce (softmax over the batch, as CLIP) or siglip (pairwise sigmoid).")
    w_contrastive: float = Field(1.0, ge=0, le=1000, description="Weight of the sensor-caption contrastive loss.")
    w_caption: float = Field(1.0, ge=0, le=1000, description="Weight of the captioning cross-entropy.")
    w_recon: float = Field(1.0, ge=0, le=1000, description="Weight of the masked-patch reconstruction MSE.")
    contrastive_encoder_grad: float = Field(
        1.0, ge=0, le=1, description="Scale of the contrastive gradient reaching the sensor encoder "
        "(1: end-to-end, as CoCa; 0: only the pooler and projections learn from it, as LiT's locked tower).")
    text_view: Literal["clean", "masked"] = Field(
        "clean", description="What the contrastive and caption heads read: clean (a second, unmasked encoder "
        "pass: one more encoder forward and backward, and its activations) or masked (the reconstruction "
        "pass's tokens: cheaper, but retrieval did not learn on demo with it).")

    @model_validator(mode="after")
    def _heads_divide(self) -> "ModelConfig":
        if self.dim % self.heads:
            raise ValueError(f"model.heads={self.heads} must divide model.dim={self.dim}")
        if self.text_dim % self.text_heads:
            raise ValueError(f"model.text_heads={self.text_heads} must divide model.text_dim={self.text_dim}")
        return self


class DataConfig(_Section):
    """Where samples come from and how they are corrupted for reconstruction."""

    source: Literal["synthetic", "csv"] = Field("synthetic", description="synthetic (generated, no files) or csv.")
    path: Optional[str] = Field(None, description="CSV file of minute-level data (source=csv).")
    captions_path: Optional[str] = Field(None, description="Optional captions CSV keyed by window start (source=csv).")
    channels: int = Field(32, ge=1, le=64, description="Number of sensor channels (synthetic data: 26-34 realistic).")
    minutes: int = Field(1440, ge=60, le=10080, description="Window length in minutes (a day is 1440).")
    train_samples: int = Field(100_000, ge=1, description="Synthetic training windows (generated on demand).")
    val_samples: int = Field(64, ge=1, le=MAX_VAL_SAMPLES, description="Validation windows, a fixed evenly spaced subset.")
    val_fraction: float = Field(0.1, gt=0, lt=1, description="CSV data: fraction of days held out for validation.")
    mask_ratio: float = Field(0.5, gt=0, lt=1, description="Fraction of patches masked for reconstruction.")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Seed of the synthetic data generator (independent of train.seed).")


class TrainConfig(_Section):
    """Optimisation, schedule, evaluation and stopping policy."""

    max_steps: int = Field(300, ge=0, description="Optimizer steps to run (0 = use epochs × steps_per_epoch).")
    epochs: int = Field(1, ge=1, description="Epochs, when max_steps is 0.")
    steps_per_epoch: int = Field(0, ge=0, description="Steps per epoch (0 = one pass over the training set).")
    batch_size: int = Field(16, ge=1, le=1_000_000, description="Samples per optimizer step (the effective batch).")
    grad_accum: int = Field(1, ge=1, le=4096, description="Micro-batches per step; micro-batch = batch_size/grad_accum.")
    lr: float = Field(1e-3, gt=0, le=10, description="Peak learning rate.")
    betas: tuple[Beta, Beta] = Field((0.9, 0.999), description="AdamW betas.")
    eps: float = Field(1e-8, gt=0, le=1, description="AdamW epsilon.")
    weight_decay: float = Field(0.01, ge=0, le=10, description="AdamW decoupled weight decay.")
    schedule: Literal["constant", "cosine", "rsqrt", "onecycle"] = Field("cosine", description="LR schedule.")
    warmup_frac: float = Field(0.05, ge=0, lt=1, description="Fraction of steps of linear warm-up.")
    cooldown_frac: float = Field(0.1, ge=0, lt=1, description="rsqrt: fraction of steps of linear cool-down to 0.")
    min_lr_frac: float = Field(0.0, ge=0, le=1, description="cosine/onecycle: final LR as a fraction of lr.")
    clip_grad_norm: float = Field(1.0, ge=0, description="Clip the global grad norm to this (0 = off).")
    precision: Literal["fp32", "bf16", "fp16"] = Field("fp32", description="fp32, bf16 autocast, or fp16 with a grad scaler.")
    eval_every: int = Field(50, ge=0, description="Evaluate every N steps (0 = only at start and end).")
    log_every: int = Field(1, ge=1, description="Write a step event every N steps.")
    print_every: int = Field(10, ge=1, description="Headless console: print a step line every N steps.")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Seed of torch, numpy and python RNGs and the data order.")
    overfit: int = Field(0, ge=0, description="If > 0: train and validate on this many frozen samples (a sanity gate).")
    overfit_target: float = Field(0.1, gt=0, le=1, description="Overfit gate passes when final val loss <= this x the untrained one.")
    abort_drop_db: float = Field(1.5, ge=0, description="Abort when val PSNR sits this many dB below its best...")
    abort_patience: int = Field(2, ge=0, description="...on this many consecutive evals (0 = never abort).")
    nan_policy: Literal["skip", "rollback", "stop"] = Field(
        "rollback", description="After nan_patience consecutive non-finite steps: roll back to last good or stop.")
    nan_patience: int = Field(5, ge=1, description="Consecutive non-finite steps tolerated (each is skipped).")
    rollback_lr_factor: float = Field(0.5, gt=0, le=1, description="LR multiplier applied on a NaN rollback.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto picks CUDA when available.")
    prefetch: bool = Field(True, description="Build the next batch on a background thread during the step "
                           "(off: every batch inline, for a task whose make_batch is not thread-safe).")
    data_workers: int = Field(-1, ge=-1, le=256, description="With prefetch: build batches in this many worker "
                              "processes, one ahead each (0: one thread; -1: planned from the measured batch ÷ step "
                              "cost and the cores, engine.threads).")
    threads: int = Field(0, ge=0, le=1024, description="torch intra-op threads (0 = planned from the usable cores, "
                         "engine.threads).")
    on_hangup: Literal["continue", "stop"] = Field("continue", description="SIGHUP: keep training, or checkpoint and exit.")
    oom_recovery: bool = Field(True, description="On out-of-memory, halve the micro-batch and keep the effective batch.")


class CheckpointConfig(_Section):
    """When and what to checkpoint."""

    every_steps: int = Field(100, ge=0, description="Write `last` every N steps (and at every eval); 0 = evals only.")
    keep_last: int = Field(0, ge=0, description="Also keep this many step-N checkpoints (0 = none).")
    save_best: bool = Field(True, description="Write `best` when val PSNR (or val loss) improves.")


class BudgetConfig(_Section):
    """Memory budget the guard and the tuning screen plan against."""

    vram_gb: Optional[float] = Field(None, gt=0, le=100_000, description="Budget in GiB (default: device free memory).")
    safety: float = Field(0.9, gt=0, le=1, description="Fraction of the budget a plan may use.")
    check: bool = Field(True, description="Refuse to start a run predicted not to fit (--no-vram-check disables).")


class RunConfig(_Section):
    """The whole resolved configuration of one run."""

    name: str = Field("", description="Run name (default: a timestamp); the run directory is runs/<name>.")
    task: TaskConfig = Field(default_factory=TaskConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)


SECTIONS = ("task", "model", "data", "train", "checkpoint", "budget")


def _deep_merge(base: dict, update: dict) -> dict:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _line_of(text: str, section: str | None, key: str) -> int | None:
    """Best-effort line number of ``key`` (inside ``[section]``) in TOML text, for error messages."""
    current = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        header = re.match(r"^\[([^\[\]]+)\]", stripped)
        if header:
            current = header.group(1).strip()
            if section is not None and key == section and current == section:
                return number
            continue
        if re.match(rf"^{re.escape(key)}\s*=", stripped) and (section is None or current == section):
            return number
    return None


def _describe(error: dict) -> tuple[str, str]:
    """(dotted field, 'message') for one pydantic error."""
    loc = ".".join(str(p) for p in error.get("loc", ()) if not isinstance(p, int) or True)
    msg = error.get("msg", "invalid")
    kind = error.get("type", "")
    if kind == "extra_forbidden":
        msg = "unknown key"
    elif kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        msg = f"allowed: {expected}"
    return loc, msg


def _clip(text: str, limit: int = 80) -> str:
    """At most ``limit`` characters: a 1 MB key or value must not become a 1 MB error line."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def validate(data: dict, origin: str = "config", text: str | None = None) -> RunConfig:
    """Validate a merged dict; raise ConfigError naming the first bad field (with file:line when known)."""
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        field, msg = _describe(error)
        place = origin
        if text is not None:
            parts = field.split(".")
            line = _line_of(text, parts[0] if len(parts) > 1 else None, parts[-1])
            if line:
                place = f"{origin}:{line}"
        value = error.get("input")
        shown = "" if isinstance(value, dict) or error.get("type") == "missing" else f"={_clip(repr(value), 60)}"
        if error.get("type") == "value_error":
            raise ConfigError(f"{place}: {_clip(msg.removeprefix('Value error, '), 200)}") from None
        raise ConfigError(f"{place}: {_clip(field)}{shown}: {_clip(msg, 200)}") from None


def preset_dict(task: str, preset: str) -> dict:
    """The overrides a named preset applies, or ConfigError listing the presets there are."""
    presets = PRESETS.get(task)
    if presets is None:
        raise ConfigError(f"task.name={task!r}: unknown task; allowed: {', '.join(sorted(PRESETS))}")
    if preset not in presets:
        raise ConfigError(f"--preset {preset!r}: unknown preset for task {task!r}; allowed: {', '.join(presets)}")
    return presets[preset]


#: Largest config file read (a real one is a few KiB); /dev/zero or a 10 GB file must not fill memory.
MAX_CONFIG_BYTES = 1 << 20


def _read_regular(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; OSError (with strerror) for anything else.

    Opened non-blocking and checked with fstat on the open descriptor, so a FIFO never blocks the
    open and a file swapped for one between a check and the open cannot slip through.
    """
    import errno
    import os
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory")
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) \
                else "a socket" if stat.S_ISSOCK(mode) else "a special file"
            raise OSError(errno.EINVAL, f"{kind}, not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit >> 20} MiB; a config file is a few KiB")
    return data


def read_toml(path: str | Path) -> tuple[dict, str]:
    """Parse a TOML file; ConfigError with file:line for syntax errors or unreadable files."""
    path = Path(path)
    try:
        raw = _read_regular(path, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, expected a TOML file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not valid UTF-8 text") from None
    try:
        data = tomllib.loads(text)
    except RecursionError:  # tomllib recurses per nesting level: `a = [[[[…` thousands deep
        raise ConfigError(f"{path}: invalid TOML: nested too deeply") from None
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = re.search(r"\(at line (\d+), column (\d+)\)", message)
        where = f"{path}:{match.group(1)}:{match.group(2)}" if match else str(path)
        reason = re.sub(r"\s*\(at line \d+, column \d+\)", "", message) or "invalid TOML"
        raise ConfigError(f"{where}: invalid TOML: {reason}") from None
    return data, text


def load(
    config_path: str | Path | None = None,
    preset: str | None = None,
    overrides: dict | None = None,
    task: str | None = None,
) -> RunConfig:
    """Resolve defaults → preset → TOML file → overrides (nested dict, e.g. from CLI flags) into a RunConfig."""
    file_data: dict = {}
    text = None
    origin = "config"
    if config_path is not None:
        file_data, text = read_toml(config_path)
        origin = str(config_path)
    overrides = overrides or {}
    task_name = task or overrides.get("task", {}).get("name") or file_data.get("task", {}).get("name") or "sensorlm"
    preset_name = preset or overrides.get("task", {}).get("preset") or file_data.get("task", {}).get("preset") or "demo"
    if not isinstance(task_name, str):
        raise ConfigError(f"{origin}: task.name={task_name!r}: must be a string")
    if not isinstance(preset_name, str):
        raise ConfigError(f"{origin}: task.preset={preset_name!r}: must be a string")
    base = _deep_merge(preset_dict(task_name, preset_name), {"task": {"name": task_name, "preset": preset_name}})
    # Validate the file on its own first so its errors point at its own lines.
    merged = _deep_merge(base, file_data)
    if config_path is not None:
        validate(merged, origin, text)
    merged = _deep_merge(merged, overrides)
    return validate(merged, "flags")


def load_resolved(path: str | Path) -> RunConfig:
    """Read a run directory's resolved config.toml back (what --resume uses)."""
    data, text = read_toml(path)
    return validate(data, str(path), text)


def dump_toml(config: RunConfig) -> str:
    """The resolved config as TOML text (None values are left out: TOML has no null)."""
    import tomli_w

    def strip_none(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip_none(v) for k, v in value.items() if v is not None}
        if isinstance(value, tuple):
            return list(value)
        return value

    return tomli_w.dumps(strip_none(config.model_dump()))


def fields_reference() -> list[tuple[str, str, str, str]]:
    """(section.field, type, default, description) for every config field; the README's reference table."""
    rows = []
    for section in ("name",) + SECTIONS:
        if section == "name":
            info = RunConfig.model_fields["name"]
            rows.append(("name", "str", repr(info.default), info.description or ""))
            continue
        model = RunConfig.model_fields[section].default_factory
        for key, info in model.model_fields.items():
            annotation = getattr(info.annotation, "__name__", None) or str(info.annotation).replace("typing.", "")
            rows.append((f"{section}.{key}", annotation, repr(info.default), info.description or ""))
    return rows
