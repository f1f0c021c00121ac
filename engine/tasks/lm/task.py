"""The `lm` task: next-token prediction on a packed token stream; full fine-tune, LoRA or LoRA+.

Batches: ``tokens`` (B, T + 1) int64, windows of the stream (engine.tasks.lm.data);
the model reads ``tokens[:, :-1]`` and is scored on ``tokens[:, 1:]``. The loss is
the mean token cross-entropy computed here in fp32 (logits upcast under
autocast), so micro-batches weighted by size add up to the full batch exactly
(every sample has the same T tokens).

Validation pools: ``eval_batch`` returns (sum of token losses, token count) and
the engine divides once (``eval_reduction="pooled"``); ``finalize_metrics``
adds perplexity = exp(val_loss), the primary metric.

Optimizer groups (``param_groups``): only trainable parameters get groups (a
frozen base has no gradient and no AdamW state). Plain: weight decay on
matrices, none on vectors. LoRA+ (``lm.lora.plus_ratio`` > 1): the groups of
``peft.optimizers.create_loraplus_optimizer``; each group carries
``lr_mult`` = its lr ÷ ``optimizer.lr``, which the engine multiplies into the
scheduled lr every step (a group's absolute lr would be overwritten by the
schedule). peft puts lora_B *and every trainable 1-D parameter* (norms) at
lr × ratio, embeddings at its own 1e-6.

Task state: the tokenizer kind and the token stream's sha256; a resume onto a
different corpus or tokenizer is refused.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from engine.tasks.lm import data as lmdata
from engine.tasks.lm import mfu
from engine.tasks.lm import model as lmmodel
from engine.tasks.lm.export import export as write_export
from engine.tasks.lm.model_dir import read_config
from engine.tasks.lm.spec import LMConfig
from engine.tasks.protocol import Task, TaskError

STATE_VERSION = 1


def section(config) -> LMConfig:
    """The run's `[lm]` section (``config.task_config``)."""
    return config.task_config


class LMTask(Task):
    """Causal LM on a packed token stream; see the module docstring."""

    name = "lm"
    primary_metric = ("perplexity", False)

    def __init__(self, config) -> None:
        super().__init__(config)
        self.lm = section(config)
        self.seq_len = self.lm.seq_len
        self.tokenizer = None  # a transformers tokenizer, or None for bytes

    # -- lifecycle ---------------------------------------------------------------------------
    def setup(self, state: dict | None = None) -> None:
        """Read and tokenize the corpus, check it against the model's vocabulary and any checkpoint state."""
        m = self.lm.model
        use_hf = self.lm.tokenizer == "auto" and m.path is not None
        if m.path:
            vocab = read_config(m.path).get("vocab_size")
            if type(vocab) is not int or vocab < 1:
                raise TaskError(f"lm.model.path={m.path}: config.json vocab_size={str(vocab)[:40]}: expected a "
                                "positive integer")
        else:
            vocab = m.vocab_size
        if use_hf:
            encode, eos, token_count = self._hf_tokenizer(m.path)
        else:
            encode, eos, token_count = lmdata.byte_encode, lmdata.BYTE_EOS, lmdata.BYTE_VOCAB
        if token_count > vocab:
            field = "lm.model.vocab_size" if not m.path else f"lm.model.path={m.path}"
            raise TaskError(f"{field}: the tokenizer has {token_count} tokens but the model's vocabulary is "
                            f"{vocab}; use the model's own tokenizer (lm.tokenizer='auto') or a larger vocabulary")
        self.vocab = vocab
        self.kind = "hf" if use_hf else "byte"
        docs, where = lmdata.read_documents(self.config.data.path, self.lm.text_field, self.lm.corpus_bytes)
        self.stream = lmdata.TokenStream.build(docs, encode, eos, self.seq_len, self.lm.val_fraction, where)
        self.where = where
        if state:
            self._check_state(state)

    def _hf_tokenizer(self, path: str):
        from transformers import AutoTokenizer

        try:
            # trust_remote_code=False: never a prompt on stdin, never a directory's own tokenizer code
            tok = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
        except Exception as exc:  # missing or corrupt tokenizer files raise many types
            raise TaskError(f"lm.model.path={path}: cannot load its tokenizer ({lmmodel.refusal(exc)}); "
                            "set lm.tokenizer='byte' to train on bytes") from None
        self.tokenizer = tok
        eos = tok.eos_token_id if tok.eos_token_id is not None else tok.sep_token_id
        if eos is None:
            raise TaskError(f"lm.model.path={path}: its tokenizer has no end-of-text token")
        return (lambda text: tok(text, add_special_tokens=False)["input_ids"]), int(eos), len(tok)

    def _check_state(self, state: dict) -> None:
        if state.get("version") != STATE_VERSION or state.get("tokenizer") != self.kind:
            raise TaskError(f"checkpoint task state {state!r:.120} is not this lm run's (tokenizer {self.kind})")
        if state.get("stream_sha256") != self.stream.digest:
            raise TaskError(f"data.path: {self.where}: the corpus differs from the one this checkpoint trained on "
                            "(token stream checksum); resume with the same data")

    def state_dict(self) -> dict:
        return {"version": STATE_VERSION, "tokenizer": self.kind, "stream_sha256": self.stream.digest}

    def build_model(self) -> nn.Module:
        model = lmmodel.build(self.lm, self.seq_len, self.config.train.seed)
        if lmmodel.vocab_size(model) < self.vocab:
            raise TaskError(f"lm.model.path={self.lm.model.path}: embedding has {lmmodel.vocab_size(model)} rows, "
                            f"config.json says vocab_size {self.vocab}")
        return model

    def model_source(self) -> str | None:
        """The base model's origin: its directory (resolved), or the random Llama's shape and train.seed."""
        m = self.lm.model
        if m.path:
            return f"{Path(m.path).expanduser().resolve()}"
        shape = m.model_dump(include={"hidden_size", "layers", "heads", "kv_heads", "intermediate_size",
                                      "vocab_size", "tie_embeddings"})
        return f"random Llama {json.dumps(shape, sort_keys=True)} seed {self.config.train.seed}"

    def describe(self) -> dict[str, Any]:
        """Corpus size, sequence length, vocabulary, corpus and fine-tuning mode."""
        return {"tokens": int(len(self.stream.train)), "seq_len": self.seq_len, "vocab": self.vocab,
                "corpus": self.where, "finetune": self.lm.finetune}

    def tokens_per_sample(self) -> int:
        """seq_len: every sample is one packed window (tokens/s and MFU in the step events)."""
        return self.seq_len

    # -- data ----------------------------------------------------------------------------------
    def train_size(self) -> int:
        return self.stream.train_windows()

    def val_indices(self) -> list[int]:
        n = self.stream.val_windows()
        k = min(n, self.lm.val_samples)
        return sorted({int(i) for i in np.linspace(0, n - 1, k).round()})

    def make_batch(self, indices: Sequence[int], step: int, train: bool) -> dict[str, torch.Tensor]:
        # Indices fold onto the windows there are: after a live seq_len change the engine finishes the epoch
        # in the order it drew for the old window count (the next epoch draws for the new one).
        n = self.stream.train_windows() if train else self.stream.val_windows()
        windows = np.stack([self.stream.window(int(i) % n, train) for i in indices])
        return {"tokens": torch.from_numpy(windows.astype(np.int64))}

    # -- objective -----------------------------------------------------------------------------
    def _token_losses(self, model: nn.Module, tokens: torch.Tensor, reduction: str) -> torch.Tensor:
        with lmmodel.real_mask_path():  # a no-op outside the budget's fake-tensor trace
            logits = model(input_ids=tokens[:, :-1], use_cache=False).logits
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1),
                               reduction=reduction)

    def loss(self, model: nn.Module, batch: dict, step: int):
        loss = self._token_losses(model, batch["tokens"], "mean")
        if self.faults is not None:
            loss = self.faults.on_loss(step, loss)
        return loss, {"ce": loss.detach()}

    @torch.no_grad()
    def eval_batch(self, model: nn.Module, batch: dict) -> dict[str, tuple[float, int]]:
        total = self._token_losses(model, batch["tokens"], "sum")
        return {"val_loss": (float(total), int(batch["tokens"][:, 1:].numel()))}

    def finalize_metrics(self, means: dict[str, float]) -> dict[str, float]:
        """Adds perplexity = exp(val_loss) (inf past exp's range rather than an overflow)."""
        loss = means.get("val_loss", float("nan"))
        return {**means, "perplexity": math.exp(loss) if loss < 700 else float("inf")}

    # -- optimizer -----------------------------------------------------------------------------
    def param_groups(self, model: nn.Module) -> list[dict]:
        """Trainable parameters only; LoRA+ groups with ``lr_mult`` when lm.lora.plus_ratio > 1."""
        o = self.config.optimizer
        if self.lm.finetune == "lora" and self.lm.lora.plus_ratio > 1:
            from peft.optimizers import create_loraplus_optimizer

            built = create_loraplus_optimizer(model, torch.optim.AdamW, lr=o.lr,
                                              loraplus_lr_ratio=self.lm.lora.plus_ratio,
                                              loraplus_weight_decay=o.weight_decay)
            return [{"params": list(g["params"]), "weight_decay": g["weight_decay"], "lr_mult": g["lr"] / o.lr}
                    for g in built.param_groups if g["params"]]
        trainable = [p for p in model.parameters() if p.requires_grad]
        groups = [{"params": [p for p in trainable if p.ndim >= 2], "weight_decay": o.weight_decay, "lr_mult": 1.0},
                  {"params": [p for p in trainable if p.ndim < 2], "weight_decay": 0.0, "lr_mult": 1.0}]
        return [g for g in groups if g["params"]]

    # -- live settings -------------------------------------------------------------------------
    def apply_setting(self, model: nn.Module, name: str, value: Any) -> None:
        """seq_len: re-cut the same stream into windows of the new length (the model needs no change).

        The rest of the current epoch keeps the sample order drawn for the old window count, folded onto the
        new windows (make_batch), so that epoch may repeat or skip some tokens; later epochs are exact again.
        activation_checkpointing: the decoder layers recompute in backward, or keep their activations.
        """
        if name == "activation_checkpointing":
            if not isinstance(value, bool):
                raise TaskError(f"activation_checkpointing={value!r}: must be true or false")
            core = _unwrap(model)
            lmmodel.set_activation_checkpointing(core.get_base_model() if hasattr(core, "peft_config") else core,
                                                 value)
            return
        if name != "seq_len":
            raise TaskError(f"task 'lm' has no live setting {name!r}; it has: seq_len, activation_checkpointing")
        stream = self.stream.with_seq_len(int(value))
        if stream.train_windows() < 1 or stream.val_windows() < 1:
            raise TaskError(f"lm.seq_len={value}: the corpus has too few tokens for one window of that length")
        self.seq_len, self.stream = int(value), stream

    # -- exports -------------------------------------------------------------------------------
    def export(self, model: nn.Module, out_dir: str | Path, kind: str | None = None) -> Path | None:
        """PEFT adapter (LoRA runs) or save_pretrained directory (full runs, or kind='pretrained'); atomic."""
        return write_export(_unwrap(model), out_dir, kind, tokenizer=self.tokenizer)

    def flops_per_token(self, model: nn.Module) -> float:
        """Training FLOPs per token (engine.tasks.lm.mfu) for this model and seq_len; counted once per seq_len."""
        cached = getattr(self, "_flops", None)
        if cached is not None and cached[0] == self.seq_len:
            return cached[1]
        base = _unwrap(model)
        embed = base.get_input_embeddings().weight
        matmul = trainable = 0
        for _name, p in base.named_parameters():
            if p.ndim < 2 or p is embed:
                continue
            matmul += p.numel()
            trainable += p.numel() if p.requires_grad else 0
        cfg = base.config
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        flops = mfu.flops_per_token(matmul, trainable, cfg.num_hidden_layers, cfg.num_attention_heads, head_dim,
                                    self.seq_len)
        self._flops = (self.seq_len, flops)
        return flops


def _unwrap(model: nn.Module) -> nn.Module:
    """The model inside torch.compile / DDP wrappers (a PeftModel stays a PeftModel)."""
    for attr in ("_orig_mod", "module"):
        while (hasattr(model, attr) and isinstance(getattr(model, attr), nn.Module)
               and not hasattr(model, "peft_config")):
            model = getattr(model, attr)
    return model
