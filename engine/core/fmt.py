"""Formatting of bytes and rates shared by the plan table, the guard, the budget summary and every viewer's lines."""

from __future__ import annotations

import re

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


def number(value: float | None, digits: int = 3) -> str:
    """A measured quantity (a rate, a throughput) as a person reads it: ``digits`` significant figures, whole
    numbers from ``10 ** (digits - 1)`` up with thousands separated, never an exponent in the range rates take:
    18,610 (not 1.861e+04), 464, 14.5, 1.13, 0.0312. "–" for None or a value that is not finite."""
    if value is None or value != value or value in (float("inf"), float("-inf")):
        return "–"
    if abs(value) >= 10 ** (digits - 1):
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def gib(n: int | float) -> str:
    """Bytes as GiB with two decimals ('80.00 GiB'), for budgets the user typed in GiB."""
    return f"{n / GIB:.2f} GiB"


def format_mfu(value: float | None) -> str:
    """"41.2 %", or "–" where it is unknown (0 or None: no peak, no FLOP count)."""
    return f"{100 * value:.1f} %" if value else "–"


#: Characters a terminal acts on instead of showing: C0 controls (newline, ESC), DEL and C1, the bidirectional
#: overrides and isolates (they reorder what follows them on the line), and lone surrogates (the bytes of a file
#: name that was not UTF-8, as ``os.fsdecode`` keeps them).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match) -> str:
    char = match.group()
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the undecodable byte itself
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object) -> str:
    """``text`` safe to put on a terminal line: every control character, bidi override and undecodable byte
    shown escaped (``\\x1b``, ``\\n``, ``\\u202e``, ``\\xff``), everything else unchanged.

    Run names and paths come from users and from directory listings: an ESC in a name coloured the ``runs``
    table, a newline broke it and split a one-line error in two. Every place that prints a name or a path
    passes it through here (one regex pass: ~1 µs for a line).
    """
    return _UNPRINTABLE.sub(_escaped, str(text))
