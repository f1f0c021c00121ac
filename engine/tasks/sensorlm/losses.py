"""SensorLM objectives: contrastive (InfoNCE or SigLIP), captioning cross-entropy, masked-patch MSE; and metrics.

All three are computed from one forward pass (``SensorLM.forward``) and combined as
``w_contrastive·contrastive + w_caption·caption + w_recon·recon`` (``model.w_*``).

* both contrastive losses score batch-centred embeddings (see ``contrastive_loss`` for why);
* ``infonce``: symmetric cross-entropy over the B×B cosine-similarity matrix scaled by
  exp(logit_scale) (clamped to 100, as CLIP); the matching caption is the diagonal.
* ``siglip``: sigmoid loss on every pair, +1 on the diagonal and −1 elsewhere, with a learned
  scale and bias; it needs no softmax over the batch, so its value does not depend on B as
  InfoNCE's log(B) floor does.
* caption: next-token cross-entropy over real (non-pad) targets.
* recon: MSE in normalised units over the minutes of masked patches that were actually recorded
  (gaps carry no target).

PSNR is reported on the same masked, recorded entries with a fixed peak: the data are z-scored per
channel on the training split, and the peak-to-peak range is taken as ``PSNR_PEAK`` = 6 (±3σ), so
``psnr_db = 10·log10(36 / mse)``. Predicting the channel mean everywhere (mse ≈ 1) reads ≈ 15.6 dB.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from engine.tasks.sensorlm.tokenizer import PAD_ID

#: Peak-to-peak range of z-scored data used for PSNR (±3 standard deviations).
PSNR_PEAK = 6.0


def contrastive_loss(sensor: torch.Tensor, text: torch.Tensor, logit_scale: torch.Tensor,
                     logit_bias: torch.Tensor, kind: str = "infonce") -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, B×B similarity logits) of batch-centred, L2-normalised sensor and text embeddings.

    Centring (subtracting each side's batch mean before normalising) removes the one direction
    every embedding shares. Without it, both towers collapsed onto a common vector within ~10 steps
    (mean pairwise cosine 0.999; Adam moves biases by ~lr per step in a consistent direction, which
    dwarfs the 1/√L sample-to-sample variation of a pooled embedding at init), the loss sat exactly
    at log(B) and its gradient vanished; with it, a fixed batch of 16 pairs is matched in ~10 steps.
    Similarities are therefore relative to the batch: retrieval is scored within a batch (B ≥ 2).
    """
    sensor, text = sensor.float(), text.float()
    if len(sensor) > 1:
        sensor = sensor - sensor.mean(0, keepdim=True)
        text = text - text.mean(0, keepdim=True)
    s = F.normalize(sensor, dim=-1)
    t = F.normalize(text, dim=-1)
    scale = logit_scale.float().clamp(max=math.log(100.0)).exp()
    logits = scale * s @ t.T
    if kind == "infonce":
        # InfoNCE has no bias; it enters with weight 0 so every parameter gets a gradient each step, which
        # DDP's reducer waits for (an unused one fails the next step); logits and every update are unchanged.
        logits = logits + 0.0 * logit_bias.float()
        target = torch.arange(len(s), device=s.device)
        return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)), logits
    if kind == "siglip":
        logits = logits + logit_bias.float()
        sign = 2 * torch.eye(len(s), device=s.device) - 1
        return -F.logsigmoid(sign * logits).sum() / len(s), logits
    raise ValueError(f"contrastive loss {kind!r}: allowed infonce, siglip")


def caption_loss(logits: torch.Tensor, targets: torch.Tensor, divide_by: torch.Tensor | None = None) -> torch.Tensor:
    """Mean next-token cross-entropy over non-pad targets; logits (B, L', V), targets (B, L').

    ``divide_by``: the sum over this batch's non-pad targets divided by it instead (a rank's share of the
    job's token count, engine.tasks.sensorlm.job); None: this batch's own mean.
    """
    flat, want = logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1)
    if divide_by is None:
        return F.cross_entropy(flat, want, ignore_index=PAD_ID)
    return F.cross_entropy(flat, want, ignore_index=PAD_ID, reduction="sum") / divide_by


def caption_tokens(targets: torch.Tensor) -> torch.Tensor:
    """How many targets count in the caption loss (the non-pad ones)."""
    return (targets != PAD_ID).sum()


def masked_patch_error(recon: torch.Tensor, patches: torch.Tensor, patch_valid: torch.Tensor,
                       patch_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of squared errors, count) over recorded entries of masked patches; all (B, P, pt·pc) but the mask (B, P)."""
    weight = patch_valid.to(recon.dtype) * patch_mask[..., None].to(recon.dtype)
    err = (recon.float() - patches.float()) ** 2 * weight
    return err.sum(), weight.sum()


def recon_loss(recon, patches, patch_valid, patch_mask) -> torch.Tensor:
    """Masked-patch MSE in normalised units (0 when nothing masked was recorded)."""
    sse, n = masked_patch_error(recon, patches, patch_valid, patch_mask)
    return sse / n.clamp_min(1.0)


def psnr_db(mse: float) -> float:
    """PSNR in dB of a mean squared error in z-scored units, peak PSNR_PEAK."""
    return 10.0 * math.log10(PSNR_PEAK**2 / max(mse, 1e-12))


def retrieval_top1(logits: torch.Tensor) -> float:
    """Fraction of sensor rows whose best-scoring caption is their own (chance: 1 / B)."""
    return (logits.argmax(dim=1) == torch.arange(len(logits), device=logits.device)).float().mean().item()


def token_accuracy(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of non-pad targets the decoder's argmax predicts."""
    real = targets != PAD_ID
    hits = (logits.argmax(-1) == targets) & real
    return (hits.sum() / real.sum().clamp_min(1)).item()
