"""SensorLM as the registry sees it, torch-free: its config section ``[sensorlm]``, presets, capabilities.

The section has two sub-tables, ``[sensorlm.model]`` (the shape and the losses) and
``[sensorlm.data]`` (the synthetic generator, the CSV format's window and the
reconstruction mask). Where the data comes from is the shared ``data.path``: a CSV
file of minute-level data (docs/CSV_FORMAT.md), or synthetic days when it is unset.

The presets are sized so that ``demo`` learns visibly in minutes on two CPU cores
and ``base`` is the reference ViT-B-scale encoder at 2448 tokens.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from engine.core.sections import MAX_SEED, MAX_VAL_SAMPLES, Section
from engine.core.taskspec import Capabilities, Metric, Setting, TaskSpec

#: Attention implementations of the sensor encoder (engine.tasks.sensorlm.model.BACKENDS says the same).
BACKENDS = ("sdpa", "math", "chunked")
#: Largest training set (each epoch's order is a permutation in memory; a 1e12 typo is a config error).
MAX_TRAIN_SAMPLES = 100_000_000


class SensorLMModel(Section):
    """Model shape and loss weights."""

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
        "infonce", description="Contrastive loss: infonce (softmax over the batch, as CLIP) or siglip (pairwise "
        "sigmoid).")
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
    def _heads_divide(self) -> "SensorLMModel":
        if self.dim % self.heads:
            raise ValueError(f"sensorlm.model.heads={self.heads} must divide sensorlm.model.dim={self.dim}")
        if self.text_dim % self.text_heads:
            raise ValueError(f"sensorlm.model.text_heads={self.text_heads} must divide "
                             f"sensorlm.model.text_dim={self.text_dim}")
        return self


class SensorLMData(Section):
    """The windows: their shape, the synthetic generator, the CSV split and the reconstruction mask."""

    captions_path: Optional[str] = Field(None, description="Optional captions CSV keyed by window start "
                                         "(with data.path).")
    channels: int = Field(32, ge=1, le=64, description="Number of sensor channels (synthetic data: 26-34 realistic).")
    minutes: int = Field(1440, ge=60, le=10080, description="Window length in minutes (a day is 1440).")
    train_samples: int = Field(100_000, ge=1, le=MAX_TRAIN_SAMPLES,
                               description="Synthetic training windows (generated on demand).")
    val_samples: int = Field(64, ge=1, le=MAX_VAL_SAMPLES, description="Validation windows, a fixed evenly spaced "
                             "subset.")
    val_fraction: float = Field(0.1, gt=0, lt=1, description="CSV data: fraction of days held out for validation.")
    mask_ratio: float = Field(0.5, gt=0, lt=1, description="Fraction of patches masked for reconstruction.")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Seed of the synthetic data generator (independent of "
                      "train.seed).")


class SensorLMConfig(Section):
    """SensorLM's own section: ``[sensorlm.model]`` and ``[sensorlm.data]``."""

    model: SensorLMModel = Field(default_factory=SensorLMModel, description="Model shape and loss weights.")
    data: SensorLMData = Field(default_factory=SensorLMData, description="Window shape, generator and mask.")


def _model(**kw) -> dict:
    return {"sensorlm": {"model": kw}}


PRESETS: dict[str, dict] = {
    # ~0.6M params, 24 tokens (one per hour, each spanning all 32 channels): learns visibly in 300 steps
    # on 2 CPU cores. Hour-by-all-channel patches and lr 5e-4 are what made retrieval learn that fast:
    # with 60x4 patches (192 tokens, a shared patch projection across channel groups) or lr 2e-3 it
    # stayed at chance for 300 steps (measurements in engine/tasks/sensorlm/model.py).
    "demo": {
        "sensorlm": {"model": {"dim": 64, "depth": 2, "heads": 4, "patch_time": 60, "patch_channels": 32,
                               "text_dim": 64, "text_depth": 1, "decoder_depth": 1, "text_heads": 4,
                               "embed_dim": 64, "max_caption_tokens": 48, "vocab_size": 512},
                     "data": {"channels": 32, "val_samples": 64}},
        "train": {"batch_size": 16, "max_steps": 300}, "optimizer": {"lr": 5e-4}, "evaluation": {"every": 50},
    },
    # ~11M params, 768 tokens (48 x 16).
    "tiny": {
        "sensorlm": {"model": {"dim": 256, "depth": 8, "heads": 4, "patch_time": 30, "patch_channels": 2,
                               "text_dim": 256, "text_depth": 2, "decoder_depth": 2, "text_heads": 4,
                               "embed_dim": 256, "max_caption_tokens": 64},
                     "data": {"channels": 32}},
        "train": {"batch_size": 16, "max_steps": 2000}, "optimizer": {"lr": 1e-3}, "evaluation": {"every": 200},
    },
    # ~43M params, 1152 tokens (72 x 16).
    "small": {
        "sensorlm": {"model": {"dim": 512, "depth": 8, "heads": 8, "patch_time": 20, "patch_channels": 2,
                               "text_dim": 512, "text_depth": 2, "decoder_depth": 2, "text_heads": 8,
                               "embed_dim": 512, "max_caption_tokens": 64},
                     "data": {"channels": 32}},
        "train": {"batch_size": 32, "max_steps": 20000}, "optimizer": {"lr": 5e-4}, "evaluation": {"every": 500},
    },
    # ViT-B sensor encoder (85M) at the reference 1440 x 34 input in 10 x 2 patches = 2448 tokens; ~134M in all.
    "base": {
        "sensorlm": {"model": {"dim": 768, "depth": 12, "heads": 12, "patch_time": 10, "patch_channels": 2,
                               "text_dim": 512, "text_depth": 6, "decoder_depth": 6, "text_heads": 8,
                               "embed_dim": 768, "max_caption_tokens": 64},
                     "data": {"channels": 34}},
        "train": {"batch_size": 8, "max_steps": 100000}, "optimizer": {"lr": 3e-4}, "evaluation": {"every": 1000},
        "runtime": {"precision": "bf16"},
    },
}

PSNR = Metric("psnr_db", "PSNR", "dB", higher_is_better=True, kind="val")

CAPABILITIES = Capabilities(
    primary=PSNR,
    curves=(
        Metric("contrastive", "contrastive", higher_is_better=False, kind="train"),
        Metric("caption", "caption", higher_is_better=False, kind="train"),
        Metric("recon", "recon", higher_is_better=False, kind="train"),
        Metric("val_loss", "val loss", higher_is_better=False),
        Metric("val_contrastive", "val contrastive", higher_is_better=False),
        Metric("val_caption", "val caption", higher_is_better=False),
        Metric("val_recon", "val recon", higher_is_better=False),
        Metric("retrieval_top1", "retrieval top-1", higher_is_better=True),
        Metric("token_accuracy", "token accuracy", higher_is_better=True),
    ),
    # Speed order (engine.budget.plan): no checkpointing before any (it re-runs each encoder block's forward in
    # backward, ~4/3 the step's compute); sdpa (fused kernels), then math (materialises B·H·N² probabilities),
    # then chunked (math per query chunk plus a recompute in backward), larger chunks first.
    settings=(
        Setting("activation_checkpointing", "sensorlm.model.activation_checkpointing", kind="choice",
                choices=(False, True), label="act. checkpointing",
                help="recompute each encoder block in backward (less memory, ~4/3 the compute)", affects_data=False),
        Setting("attn_backend", "sensorlm.model.attn_backend", kind="choice", choices=BACKENDS,
                label="attention", help="sdpa fused · math explicit · chunked query chunks (recomputed)",
                affects_data=False),
        Setting("attn_chunk", "sensorlm.model.attn_chunk", kind="int", minimum=1, maximum=65536,
                choices=(1024, 512, 256, 128, 64, 32), label="chunk",
                help="query rows per chunk (attention chunked)", requires=(("attn_backend", "chunked"),),
                affects_data=False),
    ),
    memory="analytic",
    eval_reduction="per_batch",
    # The contrastive loss compares each sample with its micro-batch's captions only: more micro-batches, fewer
    # negatives (engine.tasks.sensorlm.job gathers across ranks, not across micro-batches).
    exact_accumulation=False,
)

SPEC = TaskSpec(
    name="sensorlm",
    config=SensorLMConfig,
    capabilities=CAPABILITIES,
    task="engine.tasks.sensorlm.task:SensorLMTask",
    presets=PRESETS,
    default_preset="demo",
    analytic_memory="engine.tasks.sensorlm.memory:ledger",
    summary="CoCa-style sensor-language model on synthetic or CSV wearable days (contrastive + caption + "
            "masked reconstruction).",
)
