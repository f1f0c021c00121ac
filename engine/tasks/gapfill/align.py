"""Deterministic alignment of a neighbour stack to the target's time: calibration plus derotation, in fp32.

Alignment is physics, not learning: decode the asinh code, undo each frame's
gain and offset (radiance), resample every neighbour so each target pixel
reads the surface point it shows now (``physics.rotate`` by the time offset,
the same rotation the generator rendered with), and re-encode. Only what
rotates is moved: the quiet-Sun limb profile and corona
(``physics.background``) belong to the pixel, so they are subtracted before
resampling and added back after. It always runs
in fp32 with autocast off: a bf16 ``sinh`` near the top of the code keeps two
significant digits of a radiance the gain is about to divide.

Pixels whose surface point was behind the limb in a neighbour are marked
invisible there (the value read is the limb's); off-disk pixels are not moved
(the corona of this synthetic Sun does not rotate). Padded "missing" slots
(zeros, gain 1, offset 0, offset 0 hours) come out as zeros, visible, and are
ignored downstream by their ``present`` flag.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.tasks.gapfill import physics


def calibrate(coded: torch.Tensor, gain: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """Radiance of coded frames (..., B, H, W) given per-band gain and offset (..., B)."""
    return (physics.decode(coded, torch) - offset[..., None, None]) / gain[..., None, None]


def quiet_background(radius: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """The quiet-Sun radiance (limb profile, corona) of each sample's disk, (N, 1, B, H, W)."""
    u, v = physics.disk_coordinates(height, width, 1.0, torch, like=radius)
    R = radius[:, None, None, None]
    return physics.background(u / R, v / R, torch)


def sampling_grid(hours: torch.Tensor, radius: torch.Tensor, height: int, width: int
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """grid_sample grid (N, K, H, W, 2) and visibility (N, K, H, W) for time offsets ``hours`` (N, K)."""
    u, v = physics.disk_coordinates(height, width, 1.0, torch, like=hours)
    R = radius[:, None, None, None]
    u, v = u / R, v / R  # (N, 1, H, W): disk_coordinates at radius 1 are pixel offsets from the centre
    lat, lon, _, on_disk = physics.pixel_to_surface(u, v, torch)
    seen_then = physics.rotate(lat, lon, -hours[:, :, None, None], torch)
    us, vs, visible = physics.surface_to_pixel(lat, seen_then, torch)
    us = torch.where(on_disk, us, u)
    vs = torch.where(on_disk, vs, v).expand_as(us)
    visible = visible | ~on_disk
    # Normalised grid coordinates (align_corners=False): pixel centre x maps to (2x + 1)/W − 1 = 2uR/W.
    grid = torch.stack([us * (2 * R / width), -vs * (2 * R / height)], dim=-1)
    return grid, visible


def align(batch: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(aligned (N,K,B,H,W) coded radiance, visible (N,K,H,W) float, truth (N,B,H,W) coded radiance)."""
    device_type = batch["stack"].device.type
    with torch.autocast(device_type, enabled=False):
        stack = batch["stack"].float()
        N, K, B, H, W = stack.shape
        radiance = calibrate(stack, batch["gain"].float(), batch["offset"].float())
        grid, visible = sampling_grid(batch["hours"].float(), batch["radius"].float(), H, W)
        quiet = quiet_background(batch["radius"].float(), H, W)  # (N, 1, B, H, W): stays with the pixel
        moved = F.grid_sample((radiance - quiet).reshape(N * K, B, H, W), grid.reshape(N * K, H, W, 2),
                              mode="bicubic", padding_mode="border", align_corners=False)
        aligned = physics.encode(moved.reshape(N, K, B, H, W) + quiet, torch)
        truth = physics.encode(calibrate(batch["target"].float(), batch["target_gain"].float(),
                                         batch["target_offset"].float()), torch)
    return aligned, visible.float(), truth


def unaligned(batch: dict) -> torch.Tensor:
    """Calibrated but not derotated neighbours (N,K,B,H,W), coded: what the nearest/linear baselines use."""
    with torch.autocast(batch["stack"].device.type, enabled=False):
        return physics.encode(calibrate(batch["stack"].float(), batch["gain"].float(), batch["offset"].float()),
                              torch)
