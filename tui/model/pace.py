"""The dashboard's pace limits, checked where a flag is parsed (textual-free: `train` checks --refresh before it
starts an engine, so a bad value leaves nothing behind)."""

from __future__ import annotations

#: Allowed plot refresh rates (Hz): above 2 Hz the UI costs training throughput (research, 4 Hz: −15-25 %).
MAX_REFRESH_HZ = 2.0
#: Text panels redraw at most this often (Hz).
MAX_TEXT_HZ = 4.0


def check_refresh(hz: float | None) -> float:
    """Plot redraws per second: None → 1; ValueError naming --refresh unless 0 < hz ≤ 2."""
    if hz is None:
        return 1.0
    if not (isinstance(hz, (int, float)) and 0 < hz <= MAX_REFRESH_HZ):
        raise ValueError(f"--refresh {hz!r}: plot redraws per second must be > 0 and <= {MAX_REFRESH_HZ:g}")
    return float(hz)
