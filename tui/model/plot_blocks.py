"""Full-history plot reduction that costs the same at 1k or 1M steps: cached power-of-two blocks.

``history.minmax_columns`` re-reads every point at every frame (O(n): ~1 ms
per million points per series), which is most of a 1M-step frame once the
chart itself draws in ~1.5 ms. Here the history is cut into blocks of ``b``
rows aligned on the ring's absolute row numbers, with ``b`` the smallest
power of two that leaves at most ``columns`` blocks. A complete block never
changes while the ring only grows, so its min/max (or sum) is computed once
and kept; a frame reduces only the blocks completed since the last one, the
newest partial block and, once the ring wraps, the partial oldest one.
``b`` doubles when the history does (the cache is then rebuilt: one O(n)
pass per doubling), and a rewind (``Ring.drop_newest``) or an overwrite
resets it (``Ring.generation``).

What it costs in the picture: between ``columns / 2`` and ``columns`` blocks,
so between one and two points per plot column instead of exactly two; the
min and max of every block are still exact, so no spike is ever lost.
"""

from __future__ import annotations

import numpy as np

from tui.model.history import Ring


class BlockReducer:
    """Min/max (``kind="minmax"``) or mean (``kind="mean"``) of one ring column per block, cached."""

    def __init__(self, kind: str) -> None:
        if kind not in ("minmax", "mean"):
            raise ValueError(f"kind={kind!r}: allowed minmax, mean")
        self.kind = kind
        self._key: tuple | None = None  # (ring id, column, generation, block size)
        self._first = 0  # absolute id of the first cached block
        self._rows: list[np.ndarray] = []  # per cached block: [x0, y0, x1, y1] (minmax) or [x, y] (mean)
        #: Blocks reduced from raw rows so far (the tests read it to see the cache work).
        self.reduced = 0

    def reduce(self, ring: Ring, column: int, x_column: int, columns: int) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of the whole history of ``ring`` column ``column`` against ``x_column``, ≤ 2 points a block."""
        n = len(ring)
        columns = max(1, int(columns))
        if n == 0:
            return np.empty(0), np.empty(0)
        size = 1
        while -(-n // size) > columns:
            size *= 2
        if size == 1:  # fewer points than columns: nothing to reduce
            x, y = ring.column(x_column), ring.column(column)
            keep = np.isfinite(y)
            return x[keep], y[keep]
        oldest = ring.total - n  # absolute row number of the ring's first row
        newest = ring.total      # one past the last
        key = (id(ring), column, x_column, ring.generation, size)
        if key != self._key:
            self._key, self._first, self._rows = key, oldest // size, []
        # Blocks that fell off the front, or that the front now cuts (partial), leave the cache.
        first_full = -(-oldest // size)
        while self._rows and self._first < first_full:
            self._rows.pop(0)
            self._first += 1
        if not self._rows:
            self._first = first_full
        complete_end = newest // size  # blocks [first_full, complete_end) are complete
        for block in range(self._first + len(self._rows), complete_end):
            self._rows.append(self._block(ring, column, x_column, block * size, (block + 1) * size, oldest))
        parts: list[np.ndarray] = []
        if oldest % size and oldest < min(first_full * size, newest):  # the partial oldest block
            parts.append(self._block(ring, column, x_column, oldest, min(first_full * size, newest), oldest))
        parts.extend(self._rows)
        tail = max(complete_end * size, oldest)
        if tail < newest and complete_end >= first_full:  # the newest, still-growing block
            parts.append(self._block(ring, column, x_column, tail, newest, oldest))
        if not parts:
            return np.empty(0), np.empty(0)
        table = np.stack(parts)
        width = 2 if self.kind == "mean" else 4
        points = table.reshape(-1, width // 2, 2).reshape(-1, 2)
        keep = np.isfinite(points[:, 1])
        return points[keep, 0], points[keep, 1]

    def _block(self, ring: Ring, column: int, x_column: int, start: int, end: int, oldest: int) -> np.ndarray:
        """One block's reduction over absolute rows [start, end)."""
        self.reduced += 1
        x = ring.rows_between(x_column, start - oldest, end - oldest)
        y = ring.rows_between(column, start - oldest, end - oldest)
        finite = np.isfinite(y)
        if not finite.any():
            return np.full(2 if self.kind == "mean" else 4, np.nan)
        if self.kind == "mean":
            return np.array([(x[0] + x[-1]) / 2, y[finite].mean()])
        lo = int(np.argmin(np.where(finite, y, np.inf)))
        hi = int(np.argmax(np.where(finite, y, -np.inf)))
        a, b = min(lo, hi), max(lo, hi)
        return np.array([x[a], y[a], x[b], y[b]])
