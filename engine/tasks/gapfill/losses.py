"""The training loss (asinh-coded space, bounded gradients) and the reported metric (hard display PSNR).

Loss = Charbonnier + w_g · gradient matching + w_d · Charbonnier in a
*softened* display space. Why each piece:

- The code space is where the data lives: bounded, smooth, every pixel
  supervised. Charbonnier (√(e² + ε²)) has a gradient in (−1, 1) everywhere.
- Gradient matching compares image differences, so a blurred answer costs
  as well as a wrong one.
- The display term makes the loss feel the per-band weighting the metric
  uses. The hard mapping ``clip(s, 0, 1) ** gamma`` has zero gradient below
  its threshold and an infinite slope at it (gamma < 1); runs trained on it
  can diverge. Here ``(s + eps) ** gamma − eps ** gamma`` sends 0 to
  0 exactly and its slope is at most ``gamma · eps ** (gamma − 1)`` (≈ 7 at
  eps 5e-3, gamma 0.5) times the bounded slope of the decode.

The reported PSNR uses the *hard* mapping (eps = 0) under no_grad, per sample
and band, then averaged: ``mean_b 10·log10(1 / MSE_b)``. The PSNR of the
pooled MSE (all bands together) reads lower, by Jensen's inequality (−log is
convex), by several dB when the bands' errors differ as much as they do here,
and would not be comparable with the baselines' table.
"""

from __future__ import annotations

import torch

from engine.tasks.gapfill import physics


def display_map(coded: torch.Tensor, eps: float) -> torch.Tensor:
    """Coded radiance (..., B, H, W) → display values in [0, 1]; differentiable with bounded slope when eps > 0."""
    vmin, vmax, gamma = (torch.tensor(x, dtype=coded.dtype, device=coded.device)[:, None, None]
                         for x in physics.display_parameters())
    radiance = physics.decode(coded.clamp(-1.0, 1.0), torch)
    scaled = ((radiance - vmin) / (vmax - vmin)).clamp(0.0, 1.0)
    if eps == 0.0:
        return scaled**gamma
    return (scaled + eps) ** gamma - eps**gamma


def charbonnier(prediction: torch.Tensor, truth: torch.Tensor, eps: float) -> torch.Tensor:
    """Per-sample Charbonnier, mean over everything but the first dimension, shape (N,)."""
    return torch.sqrt((prediction - truth) ** 2 + eps**2).flatten(1).mean(1)


def gradient_matching(prediction: torch.Tensor, truth: torch.Tensor, eps: float) -> torch.Tensor:
    """Per-sample Charbonnier of horizontal and vertical differences, averaged, shape (N,)."""
    return 0.5 * sum(charbonnier(prediction.diff(dim=axis), truth.diff(dim=axis), eps) for axis in (-1, -2))


def display_term(prediction: torch.Tensor, truth: torch.Tensor, charbonnier_eps: float, display_eps: float
                 ) -> torch.Tensor:
    """Per-sample Charbonnier in the softened display space, shape (N,)."""
    return charbonnier(display_map(prediction, display_eps), display_map(truth, display_eps), charbonnier_eps)


def terms(prediction: torch.Tensor, truth: torch.Tensor, cfg) -> dict[str, torch.Tensor]:
    """The three loss terms per sample (N,), unweighted, keyed as the task's components; ``cfg``: LossConfig."""
    prediction, truth = prediction.float(), truth.float()
    return {"charbonnier": charbonnier(prediction, truth, cfg.charbonnier_eps),
            "gradient": gradient_matching(prediction, truth, cfg.charbonnier_eps),
            "display": display_term(prediction, truth, cfg.charbonnier_eps, cfg.display_eps)}


def total(parts: dict[str, torch.Tensor], cfg) -> torch.Tensor:
    """Weighted sum of the terms (per sample when the terms are)."""
    return parts["charbonnier"] + cfg.gradient * parts["gradient"] + cfg.display * parts["display"]


@torch.no_grad()
def band_psnr(prediction: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """Display PSNR per sample and band, (N, B), dB, with the exact hard display mapping."""
    shown = display_map(prediction.float(), 0.0)
    real = display_map(truth.float(), 0.0)
    mse = ((shown - real) ** 2).mean(dim=(-2, -1)).clamp(min=1e-12)
    return 10.0 * torch.log10(1.0 / mse)


@torch.no_grad()
def pooled_psnr(prediction: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """PSNR of the MSE pooled over all bands, per sample (N,): NOT the reported metric (see module docstring)."""
    shown = display_map(prediction.float(), 0.0)
    real = display_map(truth.float(), 0.0)
    mse = ((shown - real) ** 2).flatten(1).mean(1).clamp(min=1e-12)
    return 10.0 * torch.log10(1.0 / mse)
