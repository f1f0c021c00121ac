"""A numpy ring buffer of rows: the newest samples of a bounded series (the memory panel's samples).

Per-step series are not held here: the charts read them from the run's step record
(tui.model.step_series), by what they draw.
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
