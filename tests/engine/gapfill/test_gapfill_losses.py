"""The loss has bounded gradients everywhere; the reported PSNR is per band, and not the pooled figure."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gapfill_helpers import make_config  # pytest puts this test directory on sys.path

from engine.tasks.gapfill import losses, physics
from engine.tasks.gapfill.spec import LossConfig
from engine.tasks.gapfill.task import GapfillTask

#: Largest per-pixel slope allowed for any term (the display term's analytic bound is ~50 at eps 5e-3).
SLOPE_BOUND = 100.0


def _dense_grid(side: int = 64) -> torch.Tensor:
    """(1, B, side, side) predictions: every band sweeps [-1, 1] densely and holds its exact display threshold."""
    values = np.linspace(-1.0, 1.0, side * side - len(physics.BANDS))
    thresholds = [float(physics.encode(np.float64(vmin), np)) for vmin, _, _ in physics.DISPLAY]
    per_band = [np.random.default_rng(b).permutation(np.concatenate([values, thresholds])) for b in range(6)]
    return torch.tensor(np.stack(per_band).reshape(1, 6, side, side), dtype=torch.float32)


def _slopes(term: str, prediction: torch.Tensor, truth: torch.Tensor, cfg: LossConfig) -> torch.Tensor:
    """|d term_sum / d prediction| per pixel (the terms are means, so the gradient is scaled back by numel)."""
    prediction = prediction.clone().requires_grad_(True)
    value = losses.terms(prediction, truth, cfg)[term].sum()
    (grad,) = torch.autograd.grad(value, prediction)
    return grad.abs() * prediction[0].numel()


@pytest.mark.parametrize("term", ["charbonnier", "gradient", "display"])
@pytest.mark.parametrize("truth_at", ["threshold", "spread"])
def test_each_loss_term_has_finite_bounded_gradient_on_a_dense_grid(term, truth_at):
    cfg = LossConfig()
    prediction = _dense_grid()
    if truth_at == "threshold":  # the truth sits exactly at each band's display threshold
        thresholds = [float(physics.encode(np.float64(d[0]), np)) for d in physics.DISPLAY]
        truth = torch.tensor(thresholds, dtype=torch.float32)[None, :, None, None].expand_as(prediction).clone()
    else:
        truth = torch.flip(prediction, dims=(-1,))
    slopes = _slopes(term, prediction, truth, cfg)
    assert torch.isfinite(slopes).all()
    assert slopes.max() <= SLOPE_BOUND


def test_hard_display_mapping_is_why_the_loss_is_softened():
    # The same term with the metric's hard mapping: zero gradient below the threshold, unbounded at it.
    cfg = LossConfig(display_eps=1e-12)
    prediction = _dense_grid()
    truth = torch.full_like(prediction, 0.6)
    slopes = _slopes("display", prediction, truth, cfg)
    assert not (torch.isfinite(slopes).all() and slopes.max() <= SLOPE_BOUND)
    below = prediction < physics.encode(torch.tensor([d[0] for d in physics.DISPLAY]), torch)[None, :, None, None]
    assert (slopes[below] == 0).all()  # the flat region the coded-space terms have to supervise


def _numpy_band_psnr(prediction: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per sample and band display PSNR, written out from the mapping's definition."""
    vmin = np.array([d[0] for d in physics.DISPLAY])[:, None, None]
    vmax = np.array([d[1] for d in physics.DISPLAY])[:, None, None]
    gamma = np.array([d[2] for d in physics.DISPLAY])[:, None, None]

    def show(coded):
        radiance = np.sinh(np.clip(coded.astype(np.float64), -1, 1) * physics.ASINH_RANGE) * physics.ASINH_SCALE
        return np.clip((radiance - vmin) / (vmax - vmin), 0, 1) ** gamma

    mse = np.stack([((show(p) - show(t)) ** 2).mean(axis=(-2, -1)) for p, t in zip(prediction, truth)])
    return 10 * np.log10(1 / np.maximum(mse, 1e-12))


def test_reported_psnr_is_the_per_band_mean_and_not_the_pooled_figure(tiny_data):
    task = GapfillTask(make_config(tiny_data))
    task.setup()
    torch.manual_seed(0)
    model = task.build_model()
    batch = task.make_batch(task.val_indices(), 0, train=False)
    reported = task.eval_batch(model, batch)
    with torch.no_grad():
        prediction, truth, _ = task.predict(model, batch)
    per_band = _numpy_band_psnr(prediction.numpy(), truth.numpy())  # (N, B)

    assert reported["psnr_db"] == pytest.approx(per_band.mean(), abs=1e-3)
    for b, band in enumerate(physics.BANDS):
        assert reported[f"psnr_{band}_db"] == pytest.approx(per_band[:, b].mean(), abs=1e-3)
    short = (batch["gap"] <= task.cfg.samples.short_max).numpy()
    assert reported["psnr_short_db"] == pytest.approx(per_band[short].mean(), abs=1e-3)
    assert reported["psnr_long_db"] == pytest.approx(per_band[~short].mean(), abs=1e-3)

    # Pooled: one MSE over all bands. Its PSNR is lower by Jensen (−log is convex): the mean of the bands'
    # 10·log10(1/mse_b) exceeds 10·log10(1/mean_b mse_b), by more the more the bands' errors differ.
    pooled = losses.pooled_psnr(prediction, truth).numpy()
    mse = 10 ** (-per_band / 10)
    assert pooled == pytest.approx(10 * np.log10(1 / mse.mean(1)), abs=1e-3)
    gap = per_band.mean(1) - pooled
    assert (gap >= -1e-4).all()
    assert gap.mean() > 1.0
    spread = (per_band.max(1) - per_band.min(1))
    assert np.corrcoef(spread, gap)[0, 1] > 0.5  # bigger spread between bands, bigger difference
