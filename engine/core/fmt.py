"""Formatting of bytes and rates shared by the plan table, the guard, the budget summary and every viewer's lines."""

from __future__ import annotations

GIB = 1 << 30
MIB = 1 << 20


def human(n: int | float | None) -> str:
    """Bytes as a short human string: '12.3 GiB', '512.0 MiB', '980 KiB', '-' for None."""
    if n is None:
        return "-"
    n = float(n)
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def gib(n: int | float) -> str:
    """Bytes as GiB with two decimals ('80.00 GiB'), for budgets the user typed in GiB."""
    return f"{n / GIB:.2f} GiB"


def format_mfu(value: float | None) -> str:
    """"41.2 %", or "–" where it is unknown (0 or None: no peak, no FLOP count)."""
    return f"{100 * value:.1f} %" if value else "–"
