"""Numpy ring buffers for metric history, and min/max-per-column downsampling for plots.

Why numpy: the plots redraw from up to a million points; a Python loop over
60k points costs ~20 ms, numpy's reduceat over 1M costs ~2 ms
(research/textual-in-process.md). A chart then draws two points (min, max) per
plot column whatever the history length (plotext, used before tui.widgets.braille,
cost ~10-15 µs per point).
"""

from __future__ import annotations

import numpy as np


class Ring:
    """A fixed-capacity ring of rows (``width`` float columns); oldest rows fall off when full.

    Stored column-major, so one series (``column``) is a contiguous array:
    the per-frame reductions read it at memory speed instead of striding
    over the other columns. Reads copy only when the ring has wrapped.
    """

    def __init__(self, capacity: int, width: int = 1, dtype=np.float64) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self.width = width
        # Only stored rows are ever read, so the buffer is not filled: np.empty maps pages on first write, so a
        # 1M-row ring costs nothing until rows arrive (np.full touched 48 MB up front, ~50 ms on the UI thread).
        self._data = np.empty((width, capacity), dtype=dtype)
        self._start = 0  # index of the oldest row
        self._len = 0
        #: Rows ever appended (also counts those that fell off).
        self.total = 0
        #: Bumped whenever stored rows change other than by appending (caches keyed on it start over).
        self.generation = 0

    def __len__(self) -> int:
        return self._len

    def append_many(self, rows: np.ndarray) -> None:
        """Append rows (shape (n, width), or (n,) when width is 1)."""
        cols = np.asarray(rows, dtype=self._data.dtype).reshape(-1, self.width).T
        n = cols.shape[1]
        if n == 0:
            return
        self.total += n
        if n >= self.capacity:  # only the newest `capacity` rows survive
            self.generation += 1
            self._data[:] = cols[:, -self.capacity:]
            self._start, self._len = 0, self.capacity
            return
        end = (self._start + self._len) % self.capacity
        first = min(n, self.capacity - end)
        self._data[:, end:end + first] = cols[:, :first]
        if first < n:
            self._data[:, : n - first] = cols[:, first:]
        overflow = max(0, self._len + n - self.capacity)
        self._len = min(self.capacity, self._len + n)
        self._start = (self._start + overflow) % self.capacity

    def drop_newest(self, n: int) -> None:
        """Forget the newest ``n`` rows (a resumed run rewinds to its checkpoint's step)."""
        n = max(0, min(n, self._len))
        self._len -= n
        self.total -= n
        if n:
            self.generation += 1

    def rows_between(self, index: int, begin: int, end: int) -> np.ndarray:
        """Column ``index`` at rows [begin, end) counted from the oldest (a view unless it wraps)."""
        begin, end = max(0, begin), min(end, self._len)
        if end <= begin:
            return self._data[index, :0]
        a = (self._start + begin) % self.capacity
        n = end - begin
        series = self._data[index]
        if a + n <= self.capacity:
            return series[a:a + n]
        return np.concatenate((series[a:], series[: a + n - self.capacity]))

    def column(self, index: int, last: int | None = None) -> np.ndarray:
        """One column oldest-first (the newest ``last`` values when given), 1-D and contiguous."""
        n = self._len if last is None else min(last, self._len)
        return self.rows_between(index, self._len - n, self._len)

    def view(self, last: int | None = None) -> np.ndarray:
        """All columns oldest-first as an (n, width) array (a copy; for small rings and tests)."""
        return np.stack([self.column(i, last) for i in range(self.width)], axis=1)

    def last(self) -> np.ndarray | None:
        """The newest row, or None when empty."""
        if not self._len:
            return None
        return self._data[:, (self._start + self._len - 1) % self.capacity]


def _bins(n: int, columns: int):
    """Equal-count bins as two reshapeable blocks: r bins of k+1 points, then columns-r bins of k points."""
    k, r = divmod(n, columns)
    return k, r, r * (k + 1)


def _finite(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    keep = np.isfinite(y)
    if not keep.all():
        x, y = x[keep], y[keep]
    return x, y


def minmax_columns(x: np.ndarray, y: np.ndarray, columns: int) -> tuple[np.ndarray, np.ndarray]:
    """Reduce (x, y) to at most two points per column: each bin's min and max, at their own x, in x order.

    Bins hold equal numbers of points (steps are near-uniform), so the work is
    two reshapes and an argmin/argmax each: O(n) at memory speed, ~2 ms at 1M.
    Non-finite y values are dropped first, so a skipped NaN step never blanks
    a column. Short series pass through unchanged.
    """
    x, y = _finite(x, y)
    n = len(y)
    columns = max(1, int(columns))
    if n <= 2 * columns:
        return x, y
    k, r, split = _bins(n, columns)
    lo = np.empty(columns, dtype=np.int64)
    hi = np.empty(columns, dtype=np.int64)
    if r:
        block = y[:split].reshape(r, k + 1)
        base = np.arange(r) * (k + 1)
        lo[:r], hi[:r] = base + block.argmin(axis=1), base + block.argmax(axis=1)
    block = y[split:].reshape(columns - r, k)
    base = split + np.arange(columns - r) * k
    lo[r:], hi[r:] = base + block.argmin(axis=1), base + block.argmax(axis=1)
    idx = np.empty(2 * columns, dtype=np.int64)
    idx[0::2], idx[1::2] = np.minimum(lo, hi), np.maximum(lo, hi)
    return x[idx], y[idx]


def mean_columns(x: np.ndarray, y: np.ndarray, columns: int) -> tuple[np.ndarray, np.ndarray]:
    """Reduce a smooth series (an EMA) to one point per column: the bin's mean y at its middle x.

    ``x`` must be sorted (steps are): the middle of a bin is then the mean of its
    first and last x, which saves a pass over a million steps.
    """
    x, y = _finite(x, y)
    n = len(y)
    columns = max(1, int(columns))
    if n <= columns:
        return x, y
    k, r, split = _bins(n, columns)
    parts = [y[split:].reshape(columns - r, k).mean(axis=1)]
    if r:
        parts.insert(0, y[:split].reshape(r, k + 1).mean(axis=1))
    starts = np.concatenate((np.arange(r) * (k + 1), split + np.arange(columns - r) * k))
    ends = np.append(starts[1:], n) - 1
    return (x[starts] + x[ends]) / 2, np.concatenate(parts)
