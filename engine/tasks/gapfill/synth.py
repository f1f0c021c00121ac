"""Synthetic data worth learning: a rotating Sun with evolving active regions, seen in six bands.

What makes it a gap-filling problem and not a copy: the disk rotates
(differentially, ``physics``), so a neighbour frame is only useful after
alignment; active regions grow and decay over hours to days, so the longer
the gap the more a neighbour is out of date; each band responds to activity
with its own contrast and exponent, so bands carry information about each
other; each instrument has its own disk radius, per-frame gains and offsets
(drifting, jittered) and photon noise; and the record has holes: single
dropped frames and outages of 5 to 150 frames.

Torch-free (numpy + safetensors): ``sensorlm-tui data gapfill --out DIR``
needs no torch, and the demo writes its data here on first use.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from engine.tasks.gapfill import physics, shards

#: Instrument names, in order; instrument k has disk radius RADII[k] × image size.
INSTRUMENTS = ("g16", "g18", "g17", "g19")
RADII = (0.40, 0.43, 0.38, 0.41)
#: First day of the synthetic record.
EPOCH = dt.date(2026, 1, 1)


def active_regions(rng: np.random.Generator, hours: float) -> np.ndarray:
    """Active regions over [−3 days, hours + 3 days]: rows (t_peak, lifetime, amplitude, width, lat, carrington_lon)."""
    count = rng.poisson(3.0 * (hours / 24 + 6))
    t = rng.uniform(-72.0, hours + 72.0, count)
    life = rng.uniform(10.0, 60.0, count)
    amp = rng.uniform(1.0, 5.0, count)
    width = rng.uniform(0.10, 0.22, count)
    lat = np.deg2rad(rng.uniform(-40, 40, count))
    lon = rng.uniform(-np.pi, np.pi, count)
    # Brightenings: short-lived, small and bright; they make even short gaps more than a rotation.
    n_flash = rng.poisson(4.0 * (hours / 24 + 2))
    flash = np.stack([rng.uniform(-6, hours + 6, n_flash), rng.uniform(1.0, 5.0, n_flash),
                      rng.uniform(1.0, 4.0, n_flash), rng.uniform(0.07, 0.10, n_flash),
                      np.deg2rad(rng.uniform(-40, 40, n_flash)), rng.uniform(-np.pi, np.pi, n_flash)], axis=1)
    return np.concatenate([np.stack([t, life, amp, width, lat, lon], axis=1), flash])


def activity(regions: np.ndarray, lat: np.ndarray, lon_seen: np.ndarray, hour: float) -> np.ndarray:
    """Activity at the given surface points (seen longitudes at time ``hour``), summed over live regions."""
    carrington = physics.rotate(lat, lon_seen, -hour, np)  # the same rotation the aligner inverts
    envelope = np.exp(-0.5 * ((hour - regions[:, 0]) / regions[:, 1]) ** 2)
    live = regions[envelope > 1e-3]
    env = envelope[envelope > 1e-3]
    out = np.zeros_like(lat)
    sin_lat, cos_lat = np.sin(lat), np.cos(lat)
    for (_, _, amp, width, rlat, rlon), e in zip(live, env):
        cos_angle = sin_lat * np.sin(rlat) + cos_lat * np.cos(rlat) * np.cos(carrington - rlon)
        out += amp * e * np.exp(-(1.0 - cos_angle) / width**2)  # 2(1 − cos) / (2σ²): chord distance, Gaussian
    return out


def radiance(regions: np.ndarray, size: int, radius_px: float, hour: float) -> np.ndarray:
    """Noise-free radiance of every band at one time, shape (bands, size, size), float64."""
    u, v = physics.disk_coordinates(size, size, radius_px, np)
    lat, lon, mu, on_disk = physics.pixel_to_surface(u, v, np)
    act = np.where(on_disk, activity(regions, lat, lon, hour), 0.0)
    active = np.stack([q * c * act**p for q, c, p in zip(physics.QUIET, physics.CONTRAST, physics.RESPONSE)])
    return physics.background(u, v, np) + active


def _outages(rng: np.random.Generator, frames: int) -> np.ndarray:
    """Observed mask of one instrument's whole record: 3 % single drops plus outages of 5-150 frames."""
    valid = rng.random(frames) > 0.03
    for _ in range(rng.poisson(frames / 300)):
        start, length = rng.integers(0, frames), int(rng.integers(5, 151))
        valid[start: start + length] = False
    return valid


def generate(out: str | Path, days: int = 10, val_every: int = 5, size: int = 32, cadence_minutes: int = 30,
             instruments: int = 2, noise: float = 0.02, seed: int = 0) -> dict:
    """Write ``days`` days × ``instruments`` shards and a manifest into ``out``; returns the manifest."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng([seed, 3])
    per_day = round(24 * 60 / cadence_minutes)
    total_hours = days * 24.0
    regions = active_regions(rng, total_hours)
    day_names = [(EPOCH + dt.timedelta(days=d)).isoformat() for d in range(days)]
    splits = {"train": [d for i, d in enumerate(day_names) if (i + 1) % val_every],
              "val": [d for i, d in enumerate(day_names) if not (i + 1) % val_every]}
    bands = len(physics.BANDS)
    quiet = np.asarray(physics.QUIET)
    entries, instrument_info = {}, {}
    for k in range(instruments):
        name = INSTRUMENTS[k]
        radius = RADII[k] * size
        instrument_info[name] = {"radius_px": radius}
        irng = np.random.default_rng([seed, 5, k])
        valid_all = _outages(irng, days * per_day)
        base_gain = irng.uniform(0.8, 1.3, bands)
        for d, day in enumerate(day_names):
            hours = d * 24.0 + np.arange(per_day) * cadence_minutes / 60.0
            valid = valid_all[d * per_day: (d + 1) * per_day]
            gain = base_gain * (1 - 0.004 * (hours[:, None] / 24)) * np.exp(
                0.03 * irng.standard_normal((per_day, bands)))
            offset = quiet * irng.uniform(0.0, 0.05, (per_day, bands))
            frames = np.zeros((per_day, bands, size, size), np.float32)
            for i, hour in enumerate(hours):
                if not valid[i]:
                    continue  # a missing frame is zeros (and valid 0): never NaN
                counts = gain[i, :, None, None] * radiance(regions, size, radius, hour) + offset[i, :, None, None]
                sigma = np.sqrt(noise**2 * quiet[:, None, None] * np.abs(counts)
                                + (0.25 * noise * quiet[:, None, None])**2)
                counts = counts + sigma * irng.standard_normal(counts.shape)
                frames[i] = physics.encode(counts, np).astype(np.float32)
            entries[shards.shard_name(name, day)] = shards.write_shard(
                out / shards.shard_name(name, day), name, day, physics.BANDS, radius, frames, hours, valid, gain,
                offset)
    return shards.write_manifest(out, physics.BANDS, size, size, cadence_minutes, instrument_info, splits, entries)


def cache_root() -> Path:
    """``$SENSORLM_TUI_CACHE/gapfill`` or ``~/.cache/sensorlm-tui/gapfill``."""
    root = os.environ.get("SENSORLM_TUI_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "sensorlm-tui")
    return Path(root) / "gapfill"


def ensure_cached(params: dict) -> Path:
    """The data directory for generator ``params``, generated on first use (atomically: temp dir, rename).

    Keyed by the parameters and this module's source, so a changed generator never
    serves stale data. Two runs starting at once both generate; one rename wins.
    """
    source = Path(__file__).read_bytes() + Path(physics.__file__).read_bytes() + Path(shards.__file__).read_bytes()
    key = hashlib.sha256(json.dumps(params, sort_keys=True).encode() + source).hexdigest()[:16]
    target = cache_root() / key
    if (target / shards.MANIFEST).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=target.parent))
    try:
        generate(tmp, **params)
        try:
            tmp.rename(target)
        except OSError:  # another process got there first; its data is identical
            if not (target / shards.MANIFEST).is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target
