"""The summary pyramid's blocks: min / max / last / has-NaN of every aligned block of ``2**k`` values, k >= BASE.

min and max follow ``np.fmin`` / ``np.fmax``: NaN is passed over unless a block holds nothing else, and
±inf are values like any other. ``last`` is the block's last value, NaN or not. ``nan`` is 1 when any value of
the block is NaN (always 0 for integer series). A block of level k+1 is its two halves combined, so only the
base level is ever computed from raw values, and a growing series only adds blocks (``extend``). ``sum`` and
``finite`` are the sum (float64) and the count of the block's finite values (neither NaN nor ±inf): with them a
viewer draws a column's mean, a smoothed line at any zoom, from the blocks its extremes come from.
"""

from __future__ import annotations

import os
from typing import Callable

import numpy as np

from engine.run.steps.layout import BASE, HEADER, block_dtype, block_position, total_blocks, write_count


def base_blocks(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The level-BASE blocks of ``values`` (a whole number of blocks long)."""
    rows = np.asarray(values).reshape(-1, 1 << BASE)
    out = np.empty(len(rows), block_dtype(dtype))
    out["min"] = np.fmin.reduce(rows, axis=1)
    out["max"] = np.fmax.reduce(rows, axis=1)
    out["last"] = rows[:, -1]
    out["nan"] = np.isnan(rows).any(axis=1) if dtype.kind == "f" else 0
    finite = np.isfinite(rows)
    out["sum"] = np.where(finite, rows, 0).sum(axis=1, dtype=np.float64)
    out["finite"] = finite.sum(axis=1)
    return out


def combine(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Blocks of the next level from their left and right halves (same length)."""
    out = np.empty(len(left), left.dtype)
    out["min"] = np.fmin(left["min"], right["min"])
    out["max"] = np.fmax(left["max"], right["max"])
    out["last"] = right["last"]
    out["nan"] = left["nan"] | right["nan"]
    out["sum"] = left["sum"] + right["sum"]
    out["finite"] = left["finite"] + right["finite"]
    return out


def extend(dtype: np.dtype, old: int, new: int, raw: np.ndarray,
           old_block: Callable[[int, int], np.ndarray]) -> np.ndarray:
    """The pyramid records a series gains growing from ``old`` to ``new`` values, in file order.

    ``raw`` holds the values from the start of the base block ``old`` falls in (``old`` rounded down to a
    multiple of ``2**BASE``) up to at least the last complete base block below ``new``. ``old_block(k, i)``
    reads an already written block (a one-record array): a new block's left half may be one, at most one
    per level. The result goes at record ``total_blocks(old)`` of the pyramid file.
    """
    first = total_blocks(old)
    out = np.empty(total_blocks(new) - first, block_dtype(dtype))
    lo, hi = old >> BASE, new >> BASE
    if lo == hi:
        return out
    level = base_blocks(raw[: (hi - lo) << BASE], dtype)
    out[block_position(BASE, np.arange(lo, hi)) - first] = level
    k = BASE
    while True:
        k += 1
        lo_k, hi_k = old >> k, new >> k
        if lo_k == hi_k:
            return out
        children = level  # level k-1 blocks from index old >> (k-1)
        if 2 * lo_k < old >> (k - 1):
            children = np.concatenate([old_block(k - 1, 2 * lo_k), level])
        pairs = 2 * (hi_k - lo_k)
        level = combine(children[0:pairs:2], children[1:pairs:2])
        out[block_position(k, np.arange(lo_k, hi_k)) - first] = level


def catch_up(values_fd: int, summary_fd: int, dtype: np.dtype, old: int, new: int) -> None:
    """Extend a series' pyramid file from covering ``old`` values to ``new``: its blocks, then its count."""
    base = (old >> BASE) << BASE
    size = dtype.itemsize
    data = os.pread(values_fd, (new - base) * size, HEADER + base * size)
    raw = np.frombuffer(data, dtype, len(data) // size)
    blocks = block_dtype(dtype)

    def old_block(level: int, index: int) -> np.ndarray:
        at = int(block_position(level, np.array([index]))[0])
        return np.frombuffer(os.pread(summary_fd, blocks.itemsize, HEADER + at * blocks.itemsize), blocks)

    records = extend(dtype, old, new, raw, old_block)
    if len(records):
        os.pwrite(summary_fd, records.tobytes(), HEADER + total_blocks(old) * blocks.itemsize)
    write_count(summary_fd, new)
