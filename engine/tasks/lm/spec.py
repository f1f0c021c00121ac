"""The `lm` task as the registry sees it (torch-free): its `[lm]` config section, presets and capabilities.

A causal language model trained on a packed token stream, either in full or
through LoRA / LoRA+ adapters (peft). The model is a local Hugging Face
directory (``lm.model.path``, read with ``local_files_only``) or, without a
path, a Llama-shaped model built from the ``lm.model`` shape with a seeded
random initialisation (the demo and the tests). Everything that imports
torch, transformers or peft lives in ``engine.tasks.lm.task`` and is loaded
only when a run, a trace or an export needs it.
"""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import Field, model_validator

from engine.core.sections import Section
from engine.core.taskspec import Capabilities, Metric, Setting, TaskSpec

#: Target shorthands → the Llama-family projection names they stand for (peft matches by name suffix).
TARGET_SHORTHANDS: dict[str, tuple[str, ...]] = {
    "attention": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "mlp": ("gate_proj", "up_proj", "down_proj"),
    "all-linear": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
}


class LMModelConfig(Section):
    """Where the model comes from: a local Hugging Face directory, or a Llama shape with random weights."""

    path: Optional[str] = Field(None, description="Local Hugging Face causal-LM directory (config.json + weights); "
                                "read with local_files_only, never downloaded. Unset: a random Llama of the shape "
                                "below.")
    hidden_size: int = Field(64, ge=8, le=65536, description="Random init: model width.")
    layers: int = Field(2, ge=1, le=512, description="Random init: decoder layers.")
    heads: int = Field(4, ge=1, le=1024, description="Random init: attention heads; must divide hidden_size.")
    kv_heads: int = Field(2, ge=1, le=1024, description="Random init: key/value heads (grouped-query); must divide "
                          "heads.")
    intermediate_size: int = Field(176, ge=8, le=1048576, description="Random init: SwiGLU MLP width.")
    vocab_size: int = Field(256, ge=2, le=1048576, description="Random init: vocabulary (256 = the byte tokenizer's).")
    tie_embeddings: bool = Field(False, description="Random init: share the input embedding with the LM head.")
    attn_implementation: Literal["sdpa", "eager"] = Field(
        "sdpa", description="Attention kernel: sdpa (fused, no T×T kept) or eager (keeps a T×T softmax per layer).")
    activation_checkpointing: bool = Field(
        False, description="Recompute each decoder layer in backward (transformers' own API, use_reentrant=False).")

    @model_validator(mode="after")
    def _heads_divide(self) -> "LMModelConfig":
        if self.hidden_size % self.heads:
            raise ValueError(f"lm.model.heads={self.heads} must divide lm.model.hidden_size={self.hidden_size}")
        if self.heads % self.kv_heads:
            raise ValueError(f"lm.model.kv_heads={self.kv_heads} must divide lm.model.heads={self.heads}")
        return self


class LoraConfigSection(Section):
    """LoRA adapters (peft); LoRA+ when plus_ratio > 1."""

    r: int = Field(8, ge=1, le=4096, description="LoRA rank (>= 1).")
    alpha: float = Field(16.0, gt=0, description="LoRA alpha; the update is scaled by alpha / r.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the adapter input (0 keeps runs bit-exact).")
    targets: Union[str, list[str]] = Field(
        "all-linear", description="Modules to adapt: attention, mlp, all-linear, or a list of module names "
        "(e.g. [\"q_proj\", \"v_proj\"]).")
    train_norms: bool = Field(False, description="Also train the RMSNorm weights (saved in the adapter as "
                              "modules_to_save).")
    plus_ratio: float = Field(1.0, ge=1, le=1024, description="LoRA+: lora_B (and 1-D) parameters learn at "
                              "lr x this (1 = plain LoRA; the LoRA+ paper suggests 16).")

    def target_list(self) -> list[str]:
        """Targets with shorthands expanded, in a stable order."""
        items = [self.targets] if isinstance(self.targets, str) else list(self.targets)
        out: list[str] = []
        for item in items:
            for name in TARGET_SHORTHANDS.get(item, (item,)):
                if name not in out:
                    out.append(name)
        return out


class LMConfig(Section):
    """The `[lm]` section: model, fine-tuning mode, sequence length, corpus reading."""

    model: LMModelConfig = Field(default_factory=LMModelConfig)
    finetune: Literal["full", "lora"] = Field("full", description="full: every weight trains; lora: only adapters "
                                             "(and norms with lora.train_norms).")
    lora: LoraConfigSection = Field(default_factory=LoraConfigSection)
    seq_len: int = Field(128, ge=8, le=1048576, description="Tokens per training sample (packed, no padding).")
    tokenizer: Literal["auto", "byte"] = Field("auto", description="auto: the model directory's own tokenizer "
                                               "(byte-level without lm.model.path); byte: 256 byte values.")
    text_field: str = Field("text", min_length=1, description="JSONL corpora: the field holding each record's text.")
    val_fraction: float = Field(0.05, gt=0, lt=1, description="Tail of the token stream held out for validation.")
    val_samples: int = Field(32, ge=1, le=100000, description="Validation windows evaluated (evenly spaced).")
    corpus_bytes: int = Field(2_000_000, ge=1000, description="Demo corpus (no data.path): bytes of Python's "
                              "own standard-library sources to read.")


#: The reference scale: a ~0.47 B-parameter Llama, 32k vocabulary, 2048 tokens; for `plan` on a large GPU.
_BASE_SHAPE = {"hidden_size": 1024, "layers": 24, "heads": 16, "kv_heads": 16, "intermediate_size": 4096,
               "vocab_size": 32000}

PRESETS: dict[str, dict] = {
    # Byte-level, ~0.2 M parameters, full fine-tune on Python's own sources: the loss falls from ~5.6
    # (uniform over 256 bytes) visibly within a minute on 2 CPU cores.
    "demo": {
        "lm": {"model": {"hidden_size": 64, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate_size": 176},
               "finetune": "full", "seq_len": 128},
        "train": {"batch_size": 16, "max_steps": 300}, "optimizer": {"lr": 3e-3}, "evaluation": {"every": 50},
        "schedule": {"warmup_frac": 0.02},
    },
    # The tests' model: hidden 32, 2 layers, vocab 256; LoRA on every projection.
    "tiny": {
        "lm": {"model": {"hidden_size": 32, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate_size": 64},
               "finetune": "lora", "lora": {"r": 4, "alpha": 8.0, "targets": "all-linear"}, "seq_len": 32,
               "val_samples": 8},
        "train": {"batch_size": 4, "max_steps": 20}, "optimizer": {"lr": 1e-2}, "evaluation": {"every": 10},
    },
    # The reference fine-tuning workload: LoRA r 16 on every projection of a ~0.5 B model at 2048 tokens, bf16.
    "base": {
        "lm": {"model": dict(_BASE_SHAPE), "finetune": "lora", "lora": {"r": 16, "alpha": 32.0,
                                                                         "targets": "all-linear"},
               "seq_len": 2048},
        "train": {"batch_size": 8, "grad_accum": 4, "max_steps": 2000}, "optimizer": {"lr": 2e-4},
        "evaluation": {"every": 200}, "runtime": {"precision": "bf16"},
    },
}

CAPABILITIES = Capabilities(
    primary=Metric("perplexity", "perplexity", "", higher_is_better=False),
    curves=(
        Metric("val_loss", "val loss", "nats/token", higher_is_better=False),
        Metric("tokens_per_s", "tokens/s", "tok/s", higher_is_better=True, kind="train"),
        Metric("mfu", "MFU", "%", higher_is_better=True, kind="train"),
    ),
    settings=(
        Setting("seq_len", "lm.seq_len", "int", minimum=8, maximum=1048576, label="seq length",
                help="tokens per sample; memory grows with it (logits B×T×V, attention)", keeps_math=False),
        Setting("activation_checkpointing", "lm.model.activation_checkpointing", kind="choice", choices=(False, True),
                label="act. checkpointing", help="recompute each decoder layer in backward (less memory, ~4/3 the "
                "compute; transformers' own API)", affects_data=False),
    ),
    memory="analytic",
    exports=("peft_adapter", "pretrained"),
    eval_reduction="pooled",
)

SPEC = TaskSpec(
    name="lm",
    config=LMConfig,
    capabilities=CAPABILITIES,
    task="engine.tasks.lm.task:LMTask",
    presets=PRESETS,
    default_preset="demo",
    analytic_memory="engine.tasks.lm.memory:ledger",
    summary="Causal LM (transformers): full fine-tune or LoRA / LoRA+ (peft), exported as PEFT adapters (docs/LM.md).",
)
