"""The filler: a small conditioned U-Net that starts exactly as the prior-weighted blend of aligned neighbours.

Output = Σ_k (softmax_k(log prior_k + δ_k) + α_k) · aligned_k + residual, per
pixel and band, where the prior weight of neighbour k is ``present_k · (visible_k + 1e-3) / |Δt_k|``
(inverse time distance: with one neighbour each side that is linear
interpolation in time, after alignment) and δ and α (one map per slot each)
and the residual (one map per band) come from the U-Net's last convolution,
which is zero-initialised. δ re-weights the neighbours within the convex
blend; α adds unconstrained (possibly negative) weights, which is what a
sharpening or a temporal extrapolation needs and a softmax cannot express.
So the untrained model *is* the blend, every eval is judged
against a meaningful floor, and training can only move away from it by
learning something.

Conditioning: per slot the network reads the aligned frame, its visibility
map, and two constant maps (present flag, time offset in days), all multiplied
by the present flag, so a padded "missing" slot is zeros whatever its content.
``conditioned=False`` (the ablation) zeroes the conditioning the network sees;
the present gate then blinds it, and the overfit gate must fail.

Memory format: channels-last (the task converts the model; inputs are made
channels-last here), which is what cuDNN's fastest bf16 convolutions want. The
blend itself is computed in fp32 with autocast off, so under bf16 autocast only
the U-Net's convolutions run in bf16.
"""

from __future__ import annotations

import torch
from torch import nn

#: Floor of a prior weight's visibility factor: if no neighbour sees a pixel, the time prior still decides.
VISIBILITY_FLOOR = 1e-3
#: A padded slot's log-weight: exp of it is exactly 0 in fp32, with no -inf arithmetic.
MASKED_LOG_WEIGHT = -1e4
#: Slot conditioning maps per neighbour besides its bands: visibility, present, time offset.
EXTRA_MAPS = 3


def prior_log_weights(present: torch.Tensor, hours: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """log prior weight per slot and pixel (N, K, H, W); padded slots get MASKED_LOG_WEIGHT."""
    distance = hours.abs().clamp(min=1e-3)[:, :, None, None]
    log_w = torch.log(visible + VISIBILITY_FLOOR) - torch.log(distance)
    return torch.where(present[:, :, None, None] > 0, log_w, torch.full_like(log_w, MASKED_LOG_WEIGHT))


def blend(aligned: torch.Tensor, log_weights: torch.Tensor) -> torch.Tensor:
    """Σ_k softmax_k(log_weights) · aligned_k: (N, K, B, H, W), (N, K, H, W) → (N, B, H, W)."""
    weights = torch.softmax(log_weights, dim=1)
    return (weights[:, :, None] * aligned).sum(1)


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.GELU(), nn.Conv2d(cout, cout, 3, padding=1),
                         nn.GELU())


class GapfillNet(nn.Module):
    """U-Net over the conditioned neighbour stack; see the module docstring."""

    def __init__(self, slots: int, bands: int, base: int = 16, depth: int = 2, conditioned: bool = True) -> None:
        super().__init__()
        self.slots, self.bands, self.conditioned = slots, bands, conditioned
        self.stem = _block(slots * (bands + EXTRA_MAPS), base)
        self.down = nn.ModuleList()
        self.up = nn.ModuleList()
        self.merge = nn.ModuleList()
        width = base
        for _ in range(depth):
            self.down.append(nn.Sequential(nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.GELU(),
                                           _block(2 * width, 2 * width)))
            width *= 2
        for _ in range(depth):
            self.up.append(nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"),
                                         nn.Conv2d(width, width // 2, 3, padding=1), nn.GELU()))
            self.merge.append(_block(width, width // 2))
            width //= 2
        self.head = nn.Conv2d(base, 2 * slots + bands, 1)
        nn.init.zeros_(self.head.weight)  # the untrained model is exactly the blend
        nn.init.zeros_(self.head.bias)

    def features(self, aligned: torch.Tensor, visible: torch.Tensor, present: torch.Tensor, hours: torch.Tensor
                 ) -> torch.Tensor:
        """The network's input (N, K·(B+3), H, W): each slot's frame and conditioning maps, gated by presence."""
        N, K, B, H, W = aligned.shape
        if not self.conditioned:  # the ablation: the network is told nothing about its slots
            present, hours = torch.zeros_like(present), torch.zeros_like(hours)
        gate = present[:, :, None, None, None]
        maps = torch.cat([aligned, visible[:, :, None],
                          present[:, :, None, None, None].expand(N, K, 1, H, W),
                          (hours / 24.0)[:, :, None, None, None].expand(N, K, 1, H, W)], dim=2)
        return (maps * gate).reshape(N, K * (B + EXTRA_MAPS), H, W).contiguous(memory_format=torch.channels_last)

    def forward(self, aligned: torch.Tensor, visible: torch.Tensor, present: torch.Tensor, hours: torch.Tensor
                ) -> torch.Tensor:
        """Filled target (N, B, H, W), coded radiance, fp32."""
        h = self.stem(self.features(aligned, visible, present, hours))
        skips = []
        for down in self.down:
            skips.append(h)
            h = down(h)
        for up, merge in zip(self.up, self.merge):
            h = merge(torch.cat([up(h), skips.pop()], dim=1))
        out = self.head(h)
        with torch.autocast(aligned.device.type, enabled=False):
            out = out.float()
            K = self.slots
            log_w = prior_log_weights(present.float(), hours.float(), visible.float()) + out[:, :K]
            extra = (out[:, K: 2 * K] * present.float()[:, :, None, None])[:, :, None] * aligned.float()
            return blend(aligned.float(), log_w) + extra.sum(1) + out[:, 2 * K:]


def build(slots: int, bands: int, cfg) -> GapfillNet:
    """A fresh GapfillNet in channels-last memory; ``cfg``: the [gapfill.model] section."""
    net = GapfillNet(slots, bands, cfg.base, cfg.depth, cfg.conditioned)
    # Per parameter rather than ``net.to(memory_format=...)``: that swaps whole tensors, which the budget's
    # fake-tensor trace cannot do; assigning .data works for real and fake tensors alike.
    with torch.no_grad():
        for p in net.parameters():
            if p.ndim == 4:
                p.data = p.data.contiguous(memory_format=torch.channels_last)
    return net


def count_parameters(config) -> int:
    """Parameters of the run's U-Net (TaskSpec.param_count): built on the meta device, nothing allocated."""
    from engine.tasks.gapfill.spec import BANDS

    with torch.device("meta"):
        net = GapfillNet(2 * config.task_config.samples.neighbours, len(BANDS), config.task_config.model.base,
                         config.task_config.model.depth, config.task_config.model.conditioned)
    return sum(p.numel() for p in net.parameters())
