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


def bytes_pair(used: float | int | None, total: float | int | None) -> str:
    """"2.61 / 23.5 GiB": one unit when both share it, else each with its own; the unit is never dropped."""
    a, b = human_bytes(used), human_bytes(total)
    unit_a, unit_b = a.rpartition(" ")[2], b.rpartition(" ")[2]
    if used is not None and total is not None and unit_a == unit_b:
        return f"{a.rpartition(' ')[0]} / {b}"
    return f"{a} / {b}"


def middle_ellipsis(text: str, width: int, cut_text: bool = True) -> str:
    """Fit ``text`` in ``width`` columns by shortening its longest path-like words in the middle
    (runs/…/last.safetensors), then (``cut_text``) the text itself in the middle; both ends stay readable."""
    if len(text) <= width or width < 8:
        return text
    words = text.split(" ")
    while len(" ".join(words)) > width:
        paths = [i for i, w in enumerate(words) if "/" in w and len(w) > 12]
        if not paths:
            break
        i = max(paths, key=lambda j: len(words[j]))
        word, over = words[i], len(" ".join(words)) - width
        keep = max(10, len(word) - over - 1)
        head = keep // 2
        shorter = word[:head] + "…" + word[len(word) - (keep - head):]
        if len(shorter) >= len(word):
            break
        words[i] = shorter
    text = " ".join(words)
    if len(text) <= width or not cut_text:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


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


def short_label(label: str) -> str:
    """A metric label without its explanation in brackets: "val score (mean of bands)" → "val score"."""
    cut = label.find(" (")
    return label[:cut] if cut > 0 and label.endswith(")") else label


def value_text(value) -> str:
    """A setting's value as a person reads it: on / off for a flag (never "False"), else as it is."""
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


def change_text(old, new) -> str:
    """"16 → 32", "off → on", or "→ 32" when the old value is unknown (never "None → 32")."""
    return f"→ {value_text(new)}" if old is None else f"{value_text(old)} → {value_text(new)}"


def one_line(exc: BaseException) -> str:
    """An exception as the status bar says it: its message's first line, else its type's name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def progress_bar(done: int, total: int, width: int = 20) -> str:
    """"████████░░░░ 42%": how far ``done`` of ``total`` is."""
    frac = min(1.0, max(0.0, done / total)) if total > 0 else 0.0
    filled = int(round(frac * width))
    return f"{'█' * filled}{'░' * (width - filled)} {int(100 * frac)}%"
