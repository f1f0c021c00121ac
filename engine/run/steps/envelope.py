"""The exact envelope of a series over pixel columns: summary blocks inside each column, raw values at its edges.

Each column's values are split into a ragged left edge (up to the next multiple of 2**BASE), whole aligned
base blocks, and a ragged right edge. The blocks are covered by the fewest pyramid blocks (at most two per
level, as a segment tree walks bottom-up), and the edges (at most 127 values on each side) are read raw. So a
column costs about 2·log2(width) block records and ≤ 254 raw values, whatever the run's length, and the
result equals a pass over every raw value of the column. Values the pyramid does not cover yet (the writer
brings it up to date every few thousand values) are read raw too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.run.steps.layout import BASE, block_position

_ALIGN = 1 << BASE


@dataclass(frozen=True)
class Envelope:
    """Per pixel column: the steps it covers and what its values did there.

    Column ``i`` covers steps ``x[i] <= step < x[i + 1]`` (the last one up to ``step_hi`` included).
    ``min`` / ``max``: over the column's values that are not NaN, ±inf included as values; NaN when the column
    has no value or only NaN. ``nan``: the column holds at least one NaN (so ``count > 0`` with a NaN ``min``
    is a column of NaN only). ``last``: the column's last value as stored (NaN included), at step
    ``last_step``; NaN and -1 for an empty column. ``count``: values in the column. ``sum`` and ``finite``: the
    sum and the count of its finite values (``mean``), for a smoothed line at any zoom.
    """

    x: np.ndarray
    count: np.ndarray
    min: np.ndarray
    max: np.ndarray
    last: np.ndarray
    last_step: np.ndarray
    nan: np.ndarray
    sum: np.ndarray
    finite: np.ndarray

    @property
    def mean(self) -> np.ndarray:
        """Per column, the mean of its finite values (NaN for a column without one)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.finite > 0, self.sum / np.maximum(self.finite, 1), np.nan)


def column_edges(step_lo: int, step_hi: int, columns: int) -> np.ndarray:
    """``columns + 1`` integer step edges splitting ``[step_lo, step_hi]`` evenly (a column may be empty when
    there are more columns than steps)."""
    span = max(0, int(step_hi) - int(step_lo) + 1)
    return int(step_lo) + (np.arange(columns + 1, dtype=np.int64) * span) // max(1, columns)


def envelope(steps, values, blocks, summarised: int, step_lo: int, step_hi: int, columns: int) -> Envelope:
    """The envelope of one series over ``columns`` columns of [step_lo, step_hi]: ``steps`` (increasing) and
    ``values`` side by side and ``blocks``, its pyramid records covering every complete block of its first
    ``summarised`` values (engine.run.steps.column.Column each: read by ``take`` and ``searchsorted``); values
    past ``summarised`` are read raw."""
    edges = column_edges(step_lo, step_hi, columns)
    bounds = steps.searchsorted(edges, "left")
    a, b = bounds[:-1], bounds[1:]
    a1 = np.minimum((a + _ALIGN - 1) & -_ALIGN, b)  # left edge: [a, a1)
    b1 = np.maximum(a1, np.minimum(b, summarised) & -_ALIGN)  # right edge: [b1, b); between: summarised blocks
    lo_min = np.full(columns, np.nan)
    hi_max = np.full(columns, np.nan)
    has_nan = np.zeros(columns, bool)
    total = np.zeros(columns)
    finite = np.zeros(columns, np.int64)
    acc = (lo_min, hi_max, has_nan, total, finite)
    _from_blocks(blocks, a1 >> BASE, b1 >> BASE, acc)
    _from_raw(values, np.stack([a, b1], 1).ravel(), np.stack([a1 - a, b - b1], 1).ravel(), acc)
    count = b - a
    filled = count > 0
    last = np.full(columns, np.nan)
    last_step = np.full(columns, -1, np.int64)
    last[filled] = values.take(b[filled] - 1)
    last_step[filled] = steps.take(b[filled] - 1)
    return Envelope(edges[:-1], count, lo_min, hi_max, last, last_step, has_nan, total, finite)


def _from_blocks(blocks, lo: np.ndarray, hi: np.ndarray, acc: tuple) -> None:
    """Fold into the accumulators (min, max, has-NaN, sum, finite) the fewest pyramid blocks covering base blocks
    [lo, hi) of each column (the blocks a segment tree takes bottom-up: at most one on each side a level), read
    together in one pass."""
    lo_min, hi_max, has_nan, total, finite = acc
    lo, hi = lo.copy(), hi.copy()
    level = BASE
    columns, positions = [], []
    while (lo < hi).any():
        left = ((lo & 1) == 1) & (lo < hi)
        columns.append(np.flatnonzero(left))
        positions.append(block_position(level, lo[left]))
        lo += left
        right = ((hi & 1) == 1) & (lo < hi)
        hi -= right
        columns.append(np.flatnonzero(right))
        positions.append(block_position(level, hi[right]))
        lo >>= 1
        hi >>= 1
        level += 1
    where = np.concatenate(columns) if columns else np.zeros(0, np.int64)
    if not where.size:
        return
    record = blocks.take(np.concatenate(positions))
    np.fmin.at(lo_min, where, record["min"].astype(np.float64))
    np.fmax.at(hi_max, where, record["max"].astype(np.float64))
    np.logical_or.at(has_nan, where, record["nan"].astype(bool))
    np.add.at(total, where, record["sum"])
    np.add.at(finite, where, record["finite"].astype(np.int64))


def _from_raw(values, starts: np.ndarray, lengths: np.ndarray, acc: tuple) -> None:
    """Fold into the accumulators the raw ranges ``[starts, starts + lengths)``, two per column, in order."""
    lo_min, hi_max, has_nan, total, finite = acc
    n = int(lengths.sum())
    if not n:
        return
    column = np.repeat(np.arange(len(lengths)) // 2, lengths)
    offsets = np.cumsum(lengths) - lengths
    index = np.arange(n) - np.repeat(offsets, lengths) + np.repeat(starts, lengths)
    raw = values.take(index).astype(np.float64)
    per_column = lengths.reshape(-1, 2).sum(1)
    used = np.flatnonzero(per_column)
    first = np.searchsorted(column, used, "left")
    lo_min[used] = np.fmin(lo_min[used], np.fmin.reduceat(raw, first))
    hi_max[used] = np.fmax(hi_max[used], np.fmax.reduceat(raw, first))
    has_nan[used] |= np.logical_or.reduceat(np.isnan(raw), first)
    ok = np.isfinite(raw)
    total[used] += np.add.reduceat(np.where(ok, raw, 0.0), first)
    finite[used] += np.add.reduceat(ok.astype(np.int64), first)
