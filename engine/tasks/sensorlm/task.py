"""The SensorLM task: synthetic or CSV wearable days, captions, tokenizer, model, three losses, metrics.

Batches (CPU tensors from ``make_batch``): ``x`` (B, T, C) float32 z-scored per channel with gaps
set to 0 (the channel mean), ``valid`` (B, T, C) bool, ``patch_mask`` (B, P) bool (True = masked,
exactly round(mask_ratio·P) per sample), ``tokens`` (B, L) int64 (<bos> caption <eos> <pad>…).
The patch mask is drawn from a generator seeded by (data.seed, sample index, step) for training
and by (data.seed, sample index) for validation, so batches are pure functions of their arguments
and validation numbers only move when the model does.

Task state (``state_dict``, saved in every checkpoint): the tokenizer's vocabulary and the
per-channel normalisation statistics with the channel names they belong to. Both are fitted on
training data at ``setup`` — synthetic: the first FIT_SAMPLES training windows; CSV: every
training window — and restored verbatim on resume, so a resumed run sees identical tensors.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from engine.tasks.protocol import Task, TaskError
from engine.tasks.sensorlm import captions as cap
from engine.tasks.sensorlm import job, losses
from engine.tasks.sensorlm.csv_data import CsvDataset, channel_stats
from engine.tasks.sensorlm.data import VAL_OFFSET, SyntheticWearables
from engine.tasks.sensorlm.day import CHANNELS
from engine.tasks.sensorlm.model import BACKENDS, SensorLM, build
from engine.tasks.sensorlm.tokenizer import Tokenizer

STATE_VERSION = 1


def _unwrap(model: nn.Module) -> SensorLM:
    """The SensorLM inside a torch.compile / DDP wrapper (or the model itself)."""
    for attr in ("_orig_mod", "module"):
        while hasattr(model, attr) and isinstance(getattr(model, attr), nn.Module):
            model = getattr(model, attr)
    return model  # type: ignore[return-value]


class SensorLMTask(Task):
    """Contrastive + captioning + masked reconstruction on wearable days; see the module docstring."""

    name = "sensorlm"
    #: Synthetic training windows the tokenizer and the normalisation statistics are fitted on.
    FIT_SAMPLES = 256
    #: Validation windows kept in memory (they are re-read at every eval).
    VAL_CACHE = 512

    def __init__(self, config) -> None:
        super().__init__(config)
        #: The task's own section, ``[sensorlm]`` (``model`` and ``data`` sub-tables).
        self.cfg = config.task_config
        self._ready = False

    # -- lifecycle -----------------------------------------------------------------------
    def setup(self, state: dict | None = None) -> None:
        """Open the data (generator or CSV), then restore or fit the tokenizer and normalisation statistics."""
        d, m = self.cfg.data, self.cfg.model
        path = self.config.data.path
        self.minutes = d.minutes
        self.caption_words = m.max_caption_tokens - 2  # the words' budget; <bos> and <eos> take two
        self.csv: CsvDataset | None = None
        self.gen: SyntheticWearables | None = None
        if not path:
            if d.channels > len(CHANNELS):
                raise TaskError(f"sensorlm.data.channels={d.channels}: synthetic data has at most {len(CHANNELS)} "
                                "channels")
            if d.train_samples >= VAL_OFFSET:
                raise TaskError(f"sensorlm.data.train_samples={d.train_samples}: must be below {VAL_OFFSET}")
            self.gen = SyntheticWearables(d.seed, d.channels, d.minutes)
            self.channel_names = [c.name for c in self.gen.channels]
        else:
            self.csv = CsvDataset(path, d.captions_path, d.minutes, d.val_fraction, d.channels)
            self.channel_names = list(self.csv.channels)
            # Windows without a caption get one from their own signals, once, deterministically.
            for k, w in enumerate(self.csv.train + self.csv.val):
                if w.caption is None:
                    w.caption = cap.describe_signals(w.values, w.valid, self.channel_names, w.start_minute,
                                                     d.seed, k, self.caption_words)
        if m.patch_channels > len(self.channel_names) or len(self.channel_names) % m.patch_channels:
            raise TaskError(f"sensorlm.model.patch_channels={m.patch_channels} must divide the "
                            f"{len(self.channel_names)} channels (sensorlm.data.channels)")
        if d.minutes % m.patch_time:
            raise TaskError(f"sensorlm.model.patch_time={m.patch_time} must divide sensorlm.data.minutes={d.minutes}")
        self._val_item = lru_cache(maxsize=self.VAL_CACHE)(self._load_val)
        if state:
            self._restore(state)
        else:
            self._fit()
        self._ready = True

    def _fit(self) -> None:
        if self.gen is not None:
            n = min(self.FIT_SAMPLES, self.cfg.data.train_samples)
            items = [self._train_item(i) for i in range(n)]
        else:
            items = [self._train_item(i) for i in range(len(self.csv.train))]
        self.mean, self.std = channel_stats([(v, ok) for v, ok, _ in items])
        self.tokenizer = Tokenizer.build([c for _, _, c in items], self.cfg.model.vocab_size)

    def _restore(self, state: dict) -> None:
        try:
            if state.get("version") != STATE_VERSION:
                raise ValueError(f"state version {state.get('version')!r}, expected {STATE_VERSION}")
            norm = state["norm"]
            if list(norm["channels"]) != self.channel_names:
                raise TaskError(f"checkpoint was trained on channels {norm['channels']}, the data has "
                                f"{self.channel_names}")
            self.mean = np.asarray(norm["mean"], np.float32)
            self.std = np.asarray(norm["std"], np.float32)
            self.tokenizer = Tokenizer.from_state(state["tokenizer"])
        except TaskError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise TaskError(f"task state is not a SensorLM state: {exc}") from None
        if len(self.tokenizer) > self.cfg.model.vocab_size:
            raise TaskError(f"checkpoint tokenizer has {len(self.tokenizer)} words > sensorlm.model.vocab_size="
                            f"{self.cfg.model.vocab_size}")

    def state_dict(self) -> dict:
        """Tokenizer vocabulary and normalisation statistics (JSON-able)."""
        self._ensure()
        return {"version": STATE_VERSION, "tokenizer": self.tokenizer.state_dict(),
                "norm": {"channels": list(self.channel_names), "mean": [float(x) for x in self.mean],
                         "std": [float(x) for x in self.std]}}

    def _ensure(self) -> None:
        if not self._ready:
            self.setup(None)

    def build_model(self) -> nn.Module:
        """A freshly initialised SensorLM for this data's channel count and window length."""
        self._ensure()
        return build(self.cfg.model, len(self.channel_names), self.minutes)

    def describe(self) -> dict[str, Any]:
        """Facts for the dashboard header: source, channels, patches (tokens), vocabulary."""
        self._ensure()
        m = self.cfg.model
        patches = (self.minutes // m.patch_time) * (len(self.channel_names) // m.patch_channels)
        return {"source": "csv" if self.config.data.path else "synthetic", "channels": len(self.channel_names),
                "minutes": self.minutes,
                "patches": patches, "caption_tokens": m.max_caption_tokens, "vocab": len(self.tokenizer),
                "train_windows": self.train_size(), "val_windows": len(self.val_indices())}

    # -- data ------------------------------------------------------------------------------
    def _train_item(self, i: int) -> tuple[np.ndarray, np.ndarray, str]:
        if self.gen is not None:
            s = self.gen.sample(i)
            return s.values, s.valid, cap.caption(s, self.cfg.data.seed, self.caption_words)
        w = self.csv.train[i]
        return w.values, w.valid, w.caption

    def _load_val(self, j: int) -> tuple[np.ndarray, np.ndarray, str]:
        if self.gen is not None:
            s = self.gen.val_sample(j)
            return s.values, s.valid, cap.caption(s, self.cfg.data.seed, self.caption_words)
        w = self.csv.val[j]
        return w.values, w.valid, w.caption

    def train_size(self) -> int:
        """Synthetic: data.train_samples; CSV: the number of training windows."""
        self._ensure()
        return self.cfg.data.train_samples if self.gen is not None else len(self.csv.train)

    def val_indices(self) -> list[int]:
        """data.val_samples validation windows (evenly spaced over the CSV validation split)."""
        self._ensure()
        k = self.cfg.data.val_samples
        if self.gen is not None:
            return list(range(k))
        n = len(self.csv.val)
        return sorted({int(round(x)) for x in np.linspace(0, n - 1, min(k, n))})

    def caption_of(self, index: int, train: bool = True) -> str:
        """The caption text of one window (for inspection and tests)."""
        self._ensure()
        return (self._train_item(index) if train else self._val_item(index))[2]

    def _patch_mask(self, index: int, step: int, train: bool) -> np.ndarray:
        m = self.cfg.model
        P = (self.minutes // m.patch_time) * (len(self.channel_names) // m.patch_channels)
        n = min(max(1, round(self.cfg.data.mask_ratio * P)), P - 1) if P > 1 else 1
        key = [self.cfg.data.seed, 11, int(index), int(step), 1] if train else [self.cfg.data.seed, 12, int(index)]
        mask = np.zeros(P, bool)
        mask[np.random.default_rng(key).permutation(P)[:n]] = True
        return mask

    def make_batch(self, indices: Sequence[int], step: int, train: bool) -> dict[str, torch.Tensor]:
        """x, valid, patch_mask, tokens for the given windows (training or validation indices)."""
        self._ensure()
        items = [self._train_item(int(i)) if train else self._val_item(int(i)) for i in indices]
        values = np.stack([v for v, _, _ in items])
        valid = np.stack([ok for _, ok, _ in items])
        x = np.where(valid, (values - self.mean) / self.std, 0.0).astype(np.float32)
        L = self.cfg.model.max_caption_tokens
        tokens = np.array([self.tokenizer.encode(c, L) for _, _, c in items], np.int64)
        mask = np.stack([self._patch_mask(int(i), step, train) for i in indices])
        return {"x": torch.from_numpy(x), "valid": torch.from_numpy(valid),
                "patch_mask": torch.from_numpy(mask), "tokens": torch.from_numpy(tokens)}

    # -- objective -------------------------------------------------------------------------
    def _forward(self, model: nn.Module, batch: dict, whole_job: bool = False):
        """Forward and losses; ``whole_job``: the losses of the job's batch under torchrun (sensorlm.job)."""
        out = model(batch["x"], batch["patch_mask"], batch["tokens"])
        core = _unwrap(model)
        patches = core.encoder.patchify(batch["x"])
        patch_valid = core.encoder.patchify(batch["valid"])
        m = self.cfg.model
        many = whole_job and job.world()[0] > 1
        sensor, text = (job.gather(out["sensor_emb"]), job.gather(out["text_emb"])) if many else \
            (out["sensor_emb"], out["text_emb"])
        contrastive, sim = losses.contrastive_loss(sensor, text, core.logit_scale, core.logit_bias, m.contrastive)
        targets = batch["tokens"][:, 1:]
        sse, count = losses.masked_patch_error(out["recon"], patches, patch_valid, batch["patch_mask"])
        if many:
            caption = losses.caption_loss(out["logits"], targets, divide_by=job.share(losses.caption_tokens(targets)))
            recon = sse / job.share(count)
        else:
            caption = losses.caption_loss(out["logits"], targets)
            recon = sse / count.clamp_min(1.0)
        total = m.w_contrastive * contrastive + m.w_caption * caption + m.w_recon * recon
        return total, {"contrastive": contrastive, "caption": caption, "recon": recon}, out, sim, targets

    def loss(self, model: nn.Module, batch: dict, step: int):
        """Weighted sum of contrastive, caption and recon losses; the components come back detached by name."""
        total, parts, *_ = self._forward(model, batch, whole_job=True)
        if self.faults is not None:  # test-only fault injection (engine.training.faults); None in real runs
            total = self.faults.on_loss(step, total)
        return total, {k: v.detach() for k, v in parts.items()}

    def eval_batch(self, model: nn.Module, batch: dict) -> dict[str, float]:
        """val_loss (and per objective), psnr_db on masked patches, retrieval top-1, caption token accuracy."""
        with torch.no_grad():
            total, parts, out, sim, targets = self._forward(model, batch)
            # .item() calls below are device syncs; eval runs a handful of batches, so they are cheap here.
            result = {"val_loss": total.item(), **{f"val_{k}": v.item() for k, v in parts.items()}}
            result["psnr_db"] = losses.psnr_db(parts["recon"].item())
            result["retrieval_top1"] = losses.retrieval_top1(sim)
            result["retrieval_chance"] = 1.0 / len(sim)
            result["token_accuracy"] = losses.token_accuracy(out["logits"], targets)
        return result

    # -- live settings -------------------------------------------------------------------------
    def apply_setting(self, model: nn.Module, name: str, value: Any) -> None:
        """Switch the sensor encoder's ``attn_backend``, ``attn_chunk`` or ``activation_checkpointing`` in place
        (no re-initialisation; the spec declares them)."""
        core = _unwrap(model)
        if name == "activation_checkpointing":
            if not isinstance(value, bool):
                raise TaskError(f"activation_checkpointing={value!r}: must be true or false")
            core.encoder.activation_checkpointing = value
        elif name == "attn_backend":
            if value not in BACKENDS:
                raise TaskError(f"attn_backend={value!r}: allowed {', '.join(BACKENDS)}")
            core.set_attention(backend=value)
        elif name == "attn_chunk":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TaskError(f"attn_chunk={value!r}: must be an integer ≥ 1")
            core.set_attention(chunk=value)
        else:
            raise TaskError(f"task 'sensorlm' does not support changing {name}")


__all__ = ["SensorLMTask"]
