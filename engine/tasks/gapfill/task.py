"""The gap-filling Task: shards in, aligned neighbour stacks, the U-Net, the loss, per-band display PSNR.

Data: ``data.path`` names a data directory (``shards``); unset, the synthetic
Sun of ``[gapfill.synthetic]`` is generated into the cache on first use
(``synth.ensure_cached``, a second or two at demo size). Training samples are
the observed frames of the training days, each with fresh damage per step;
validation is a fixed, evenly spaced subset of the validation days' frames
with deterministic damage, half short gaps and half long.

Per step: ``make_batch`` builds CPU arrays (numpy, deterministic in its
arguments), ``loss`` aligns them on the device in fp32 with autocast off,
runs the U-Net (bf16 autocast on CUDA when ``gapfill.model.cuda_bf16``), and
computes the loss in fp32. Validation reports the model's PSNR overall, per
band and per gap class, and the three baselines' on the same samples, so the
dashboard always has its reference lines.

Task state in checkpoints: the data set's digest; resuming on other data is
refused with a one-line error.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from engine.tasks.gapfill import align, baselines, losses, samples, shards, synth
from engine.tasks.gapfill import model as gmodel
from engine.tasks.gapfill.physics import BANDS
from engine.tasks.protocol import Task, TaskError

STATE_VERSION = 1
#: Seed of the validation damage: fixed, so runs with different train.seed are measured on the same samples.
VAL_SEED = 1


class GapfillTask(Task):
    """Fill a hidden frame of a six-band image series from its aligned neighbours; see the module docstring."""

    name = "gapfill"

    def __init__(self, config) -> None:
        super().__init__(config)
        self.cfg = config.task_config
        self.data: shards.DataSet | None = None

    # -- lifecycle -----------------------------------------------------------------------
    def setup(self, state: dict | None = None) -> None:
        """Open (or generate, then open) the data directory and check it against the checkpoint's digest."""
        path = getattr(self.config.data, "path", None)
        directory = path if path else synth.ensure_cached(self.cfg.synthetic.model_dump())
        self.data = shards.open_dataset(directory)
        if self.data.bands != BANDS:
            raise TaskError(f"{directory}/{shards.MANIFEST}: bands {','.join(self.data.bands)}; this task reads "
                            f"{','.join(BANDS)}")
        step = 2 ** self.cfg.model.depth
        if self.data.height % step or self.data.width % step:
            raise TaskError(f"gapfill.model.depth={self.cfg.model.depth}: the {self.data.height}×{self.data.width} "
                            f"images must divide by 2**depth = {step}")
        if state:
            theirs = state.get("digest") if isinstance(state, dict) else None
            if state.get("version") != STATE_VERSION or theirs != self.data.digest:
                raise TaskError(f"{directory}: data set digest {self.data.digest[:12]} differs from the "
                                f"checkpoint's {str(theirs)[:12]} (resume on the data it trained on)")
        self.train_targets = samples.targets(self.data.timelines["train"])
        self.val_targets = samples.targets(self.data.timelines["val"])
        if not self.train_targets or not self.val_targets:
            raise TaskError(f"{directory}: the train and val splits must each hold observed frames")

    def _ensure(self) -> shards.DataSet:
        if self.data is None:
            self.setup(None)
        return self.data

    def state_dict(self) -> dict:
        """The data set's digest (JSON-able)."""
        return {"version": STATE_VERSION, "digest": self._ensure().digest}

    def build_model(self) -> nn.Module:
        """A fresh U-Net (channels-last) that starts as the blend."""
        self._ensure()
        return gmodel.build(2 * self.cfg.samples.neighbours, len(BANDS), self.cfg.model)

    def describe(self) -> dict[str, Any]:
        """Facts for the dashboard header."""
        data = self._ensure()
        return {"data": str(data.directory), "digest": data.digest[:12], "image": f"{data.height}×{data.width}",
                "bands": len(BANDS), "slots": 2 * self.cfg.samples.neighbours,
                "train_targets": len(self.train_targets), "val_samples": len(self.val_indices())}

    # -- data ------------------------------------------------------------------------------
    def train_size(self) -> int:
        """Observed frames of the training days (each a target)."""
        self._ensure()
        return len(self.train_targets)

    def val_indices(self) -> list[int]:
        """Validation slots 0..n-1, n even (half short, half long gaps); each maps to an evenly spaced target."""
        self._ensure()
        return list(range(min(self.cfg.samples.val_samples, 2 * len(self.val_targets)) // 2 * 2))

    def _sample(self, index: int, step: int, train: bool) -> samples.Sample:
        s = self.cfg.samples
        if train:
            k, frame = self.train_targets[index % len(self.train_targets)]
            rng = np.random.default_rng([self.config.train.seed, index, step, 17])
            long = bool(rng.random() < s.long_fraction)
            timeline = self.data.timelines["train"][k]
        else:
            count = len(self.val_indices())
            k, frame = self.val_targets[int(index * len(self.val_targets) / count)]
            rng = np.random.default_rng([VAL_SEED, index, 23])
            long = index % 2 == 1
            timeline = self.data.timelines["val"][k]
        gap, offset = samples.draw_gap(rng, long, s.short_max, s.long_min, s.long_max)
        return samples.build(timeline, frame, gap, offset, s.neighbours, s.max_hours)

    def make_batch(self, indices: Sequence[int], step: int, train: bool) -> dict[str, torch.Tensor]:
        """CPU tensors of the samples (see samples.collate); deterministic in the arguments."""
        self._ensure()
        arrays = samples.collate([self._sample(int(i), step, train) for i in indices])
        return {k: torch.from_numpy(v) for k, v in arrays.items()}

    # -- objective -------------------------------------------------------------------------
    def predict(self, model: nn.Module, batch: dict) -> tuple[torch.Tensor, torch.Tensor, tuple]:
        """(prediction, truth, (aligned, visible)) in coded radiance, fp32; alignment outside autocast."""
        aligned, visible, truth = align.align(batch)
        device_type = aligned.device.type
        bf16 = self.cfg.model.cuda_bf16 and device_type == "cuda"
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=bf16) if bf16 else nullcontext():
            prediction = model(aligned, visible, batch["present"], batch["hours"])
        return prediction.float(), truth, (aligned, visible)

    def loss(self, model: nn.Module, batch: dict, step: int):
        """Charbonnier + gradient matching + softened display term, in fp32; components detached by name."""
        prediction, truth, _ = self.predict(model, batch)
        with torch.autocast(prediction.device.type, enabled=False):
            parts = {k: v.mean() for k, v in losses.terms(prediction, truth, self.cfg.loss).items()}
            total = losses.total(parts, self.cfg.loss)
        if self.faults is not None:  # test-only fault injection (engine.training.faults); None in real runs
            total = self.faults.on_loss(step, total)
        return total, {k: v.detach() for k, v in parts.items()}

    def eval_batch(self, model: nn.Module, batch: dict) -> dict[str, float]:
        """Per-batch means of every validation metric (eval_reduction "per_batch": the engine weights by size).

        The short- and long-gap figures average over a subset of the batch. They come out
        exact anyway: the validation set is exactly half short (even slots) and half long
        (odd slots), so each batch reports its subset's *sum* divided by half its size, and
        the engine's size-weighted mean of those is the subset's mean over the whole set.
        """
        with torch.no_grad():
            prediction, truth, (aligned, visible) = self.predict(model, batch)
            with torch.autocast(prediction.device.type, enabled=False):
                per_sample = losses.total(losses.terms(prediction, truth, self.cfg.loss), self.cfg.loss)
                bands = losses.band_psnr(prediction, truth)
                others = baselines.all_methods(aligned, align.unaligned(batch), visible, batch["present"].float(),
                                               batch["hours"].float())
                other_psnr = {m: losses.band_psnr(p, truth).mean(1) for m, p in others.items()}
        short = batch["gap"].to(bands.device) <= self.cfg.samples.short_max
        n = len(bands)
        # Each .item() below is a device sync; an eval is a handful of batches, so that is cheap here.
        out = {"val_loss": per_sample.mean().item(), "psnr_db": bands.mean().item()}
        for b, band in enumerate(BANDS):
            out[f"psnr_{band}_db"] = bands[:, b].mean().item()
        for gap, mask in (("short", short), ("long", ~short)):
            out[f"psnr_{gap}_db"] = bands.mean(1)[mask].sum().item() / (n / 2)
        for method, values in other_psnr.items():
            out[f"baseline_{method}_db"] = values.mean().item()
            for gap, mask in (("short", short), ("long", ~short)):
                out[f"baseline_{method}_{gap}_db"] = values[mask].sum().item() / (n / 2)
        return out

    def finalize_metrics(self, means: dict) -> dict:
        """Release the CUDA allocator's cache after each eval: fragmentation creep once stalled a machine."""
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
        return means


__all__ = ["GapfillTask"]
