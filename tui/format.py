"""Short human formats for the panels: bytes, counts, durations, learning rates."""

from __future__ import annotations

import math


def human_bytes(n: float | int | None) -> str:
    """Binary units, three significant figures: 512 B, 3.2 KiB, 41.2 GiB; '–' for unknown."""
    if n is None:
        return "–"
    n = float(n)
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            if unit == "B":
                return f"{sign}{int(n)} B"
            return f"{sign}{n:.3g} {unit}" if n < 100 else f"{sign}{n:.0f} {unit}"
        n /= 1024
    return f"{sign}{n:.0f} TiB"  # pragma: no cover - loop always returns


def human_count(n: int | float | None) -> str:
    """1234 → 1.23k, 12_345_678 → 12.3M; '–' for unknown."""
    if n is None:
        return "–"
    n = float(n)
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}"


def human_duration(seconds: float | None) -> str:
    """45s, 3m12s, 2h05m, 3d04h; '–' for unknown or negative."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "–"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h:02d}h"


def short_float(x: float | None, digits: int = 4) -> str:
    """A float in as few characters as reads well (1e-3 → 0.001, 2.5e-05 → 2.5e-05); '–' for None/NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}g}"
