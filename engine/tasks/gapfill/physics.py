"""The physics both sides share: bands, the asinh code, the display mapping, and solar rotation.

One module on purpose. The synthetic generator renders each frame by asking,
for every pixel, which surface point it shows at that time
(``pixel_to_surface`` then ``rotate``); the aligner answers "where was this
target pixel's surface point in a neighbour frame" with the same two
functions, inverted. If they lived in two places, a change to one would make
alignment quietly wrong and the learned filler would learn to undo the bug.

Every function takes ``xp`` (numpy or torch): the names used (``sin``,
``arcsin``, ``arctan2``, ``sqrt``, ``clip``, ``where``) exist in both.

Geometry: a frame is H × W pixels; the disk is centred with radius ``R``
pixels (per instrument). Normalised disk coordinates are ``u = (x − cx)/R``
(east to west) and ``v = −(y − cy)/R`` (north up), pixel centres at integer
``x, y`` and ``cx = (W − 1)/2``. The Sun rotates differentially,
ω(lat) = ω0 · (1 − 0.25 sin² lat), with a period ``ROTATION_DAYS`` far
shorter than the real ~27 days so that a sub-pixel shift appears at gap 1 and
the whole visible hemisphere turns over within the longest gaps (the real
Sun at 32 px would barely move, and alignment would be untestable).

Coding: instruments record ``gain · radiance + offset``; frames are stored
asinh-coded, ``coded = asinh(value / ASINH_SCALE) / ASINH_RANGE``, which puts
the dynamic range of a bright region and the quiet corona into about [0, 1].
The display mapping per band is ``clip((radiance − vmin)/(vmax − vmin), 0, 1) ** gamma``
with ``vmin`` above the off-disk level, as the bench's mapping had it.
"""

from __future__ import annotations

import math

#: Band names (Å), in the order every shard stores them.
BANDS: tuple[str, ...] = ("094", "131", "171", "195", "284", "304")
#: Quiet-Sun radiance level per band (the unit the display mapping is scaled in).
QUIET = (0.6, 0.9, 2.0, 1.6, 0.8, 3.0)
#: Limb exponent per band: radiance ∝ μ**exponent (negative: limb brightening, as coronal lines show).
LIMB = (-0.15, 0.1, -0.2, -0.1, -0.25, 0.35)
#: Contrast of the active regions per band (how many quiet levels a unit of activity adds).
CONTRAST = (3.0, 2.0, 1.0, 1.4, 1.8, 0.7)
#: Response exponent of activity per band: hot bands (094, 131) see only the cores of the regions.
RESPONSE = (2.0, 1.6, 1.0, 1.2, 1.4, 0.8)
#: Display mapping per band: (vmin, vmax, gamma), radiance units; vmin sits above the corona.
DISPLAY = tuple((0.35 * q, 12.0 * q, g) for q, g in zip(QUIET, (0.45, 0.5, 0.55, 0.5, 0.45, 0.6)))

#: Scale of the asinh code (radiance units): linear below it, logarithmic above.
ASINH_SCALE = 0.05
#: Range of the asinh code: coded 1.0 is radiance ASINH_SCALE · sinh(ASINH_RANGE) ≈ 203.
ASINH_RANGE = 9.0

#: Solar rotation period of the synthetic Sun at the equator, in days (the real one is ~25).
ROTATION_DAYS = 2.0
#: Equatorial angular speed, radians per hour.
OMEGA0 = 2 * math.pi / (ROTATION_DAYS * 24.0)
#: Differential rotation: ω(lat) = OMEGA0 · (1 − DIFFERENTIAL · sin² lat).
DIFFERENTIAL = 0.25


def encode(value, xp):
    """Radiance (or recorded counts) → asinh code."""
    return xp.arcsinh(value / ASINH_SCALE) / ASINH_RANGE


def decode(coded, xp):
    """asinh code → radiance (or recorded counts); the inverse of ``encode``."""
    return xp.sinh(coded * ASINH_RANGE) * ASINH_SCALE


def disk_coordinates(height: int, width: int, radius: float, xp, like=None):
    """(u, v) of every pixel centre, shape (H, W) each, in units of the disk radius."""
    if xp.__name__ == "torch":
        ys = xp.arange(height, dtype=xp.float32, device=getattr(like, "device", None))
        xs = xp.arange(width, dtype=xp.float32, device=getattr(like, "device", None))
        yy, xx = xp.meshgrid(ys, xs, indexing="ij")
    else:
        yy, xx = xp.meshgrid(xp.arange(height, dtype=xp.float64), xp.arange(width, dtype=xp.float64),
                             indexing="ij")
    u = (xx - (width - 1) / 2) / radius
    v = -(yy - (height - 1) / 2) / radius
    return u, v


def omega(lat, xp):
    """Angular speed (radians per hour) at latitude ``lat``."""
    return OMEGA0 * (1.0 - DIFFERENTIAL * xp.sin(lat) ** 2)


def pixel_to_surface(u, v, xp):
    """(lat, lon_seen, mu, on_disk) of disk coordinates; lon_seen is the longitude from the central meridian."""
    rho2 = u * u + v * v
    on_disk = rho2 < 1.0
    mu = xp.sqrt(xp.clip(1.0 - rho2, 0.0, 1.0))
    lat = xp.arcsin(xp.clip(v, -1.0, 1.0))
    lon = xp.arctan2(u, mu)
    return lat, lon, mu, on_disk


def rotate(lat, lon_seen, hours, xp):
    """Longitude from the central meridian of the same surface point ``hours`` later (earlier if negative)."""
    return lon_seen + omega(lat, xp) * hours


def surface_to_pixel(lat, lon_seen, xp):
    """(u, v, visible) of a surface point: where it is seen on the disk, and whether it faces us."""
    visible = xp.cos(lon_seen) > 0.0
    # A point behind the limb is pinned to the limb: the aligner reads the nearest thing it can see there
    # and marks the pixel invisible, so the blend leans on a neighbour that does see it.
    lon = xp.clip(lon_seen, -math.pi / 2, math.pi / 2)
    return xp.cos(lat) * xp.sin(lon), xp.sin(lat), visible


def background(u, v, xp):
    """Quiet-Sun radiance per band at disk coordinates (..., H, W) → (..., B, H, W): limb profile and corona.

    Attached to the pixel, not to the surface, so the aligner moves only what
    rotates (radiance minus this) and adds this back at the target pixel.
    """
    rho2 = u * u + v * v
    on_disk = rho2 < 1.0
    mu = xp.sqrt(xp.clip(1.0 - rho2, 0.0, 1.0))
    corona = 0.15 * xp.exp(-xp.clip(xp.sqrt(rho2) - 1.0, 0.0, None) / 0.08)
    mu_floor = xp.clip(mu, 0.08, 1.0)
    return xp.stack([q * xp.where(on_disk, mu_floor**limb, corona) for q, limb in zip(QUIET, LIMB)], -3)


def display_parameters() -> tuple[list[float], list[float], list[float]]:
    """(vmin, vmax, gamma) per band, as lists in band order."""
    return [d[0] for d in DISPLAY], [d[1] for d in DISPLAY], [d[2] for d in DISPLAY]
