"""One array file of the record read by position (pread): a slice, a gather of scattered values, a sorted search.

Why not a memory map: a mapped 100M-step column is fine for the page cache, but every page fault on a file
mapping also maps the neighbouring cached pages (the kernel's fault-around, 64 KB), and they count in the
process's resident memory: the ~300 binary searches of one envelope touched 9,000 pages and left 700 MB
resident. Reading by position copies only what is asked for (a few kilobytes an envelope), from the page cache,
and nothing stays mapped.

A sorted column (the step file, a sparse series' steps) is searched in two levels: a coarse sample of every
``STRIDE``-th value (the step file's comes from ``step.idx`` in one read; a sparse series' is read value by
value once, and extended as it grows), then one ``STRIDE``-value slab (4 KB) per key. Values at sampled
positions are taken from the sample. Every read is clamped to ``count``, the committed length the caller took
from the header.
"""

from __future__ import annotations

import os

import numpy as np

from engine.run.steps.layout import HEADER, STRIDE

#: Scattered values closer than this (bytes) are read in one run: values on one page cost one read, and values
#: spread evenly (a summary level) cost a page each rather than everything between them.
_GAP = 4 << 10


class Column:
    """The first ``count`` values of an array file (``dtype``) from value ``start`` on, read by position.

    ``sample`` is the coarse index of the file (a one-item list, shared by every column over the same file so
    it is read once); the reader drops it when the writer redid steps (its values may have changed).
    """

    def __init__(self, file, dtype: np.dtype, count: int, start: int = 0, sample: list | None = None) -> None:
        """``file``: an open binary file (kept open while this column lives), a descriptor the caller keeps open,
        or None for a file not made yet."""
        self.file, self.dtype, self.count, self.start = file, np.dtype(dtype), max(0, int(count)), int(start)
        self._fd = file if isinstance(file, int) or file is None else file.fileno()
        self._sample = sample if sample is not None else []

    def __len__(self) -> int:
        return self.count

    def __array__(self, dtype=None, copy=None):
        values = self.slice(0, self.count)
        return values if dtype is None else values.astype(dtype)

    def view(self, start: int, count: int) -> "Column":
        """Values ``start .. start + count`` of this column, as a column of their own (nothing read)."""
        return Column(self.file, self.dtype, min(count, self.count - start), self.start + start, self._sample)

    def slice(self, lo: int, hi: int) -> np.ndarray:
        """Values ``[lo, hi)`` (clamped to the column)."""
        lo, hi = max(0, lo), min(hi, self.count)
        return self._read(self.start + lo, self.start + hi)

    def _read(self, lo: int, hi: int) -> np.ndarray:
        """File values ``[lo, hi)`` (positions in the file, not in this view)."""
        if hi <= lo or self.file is None:
            return np.zeros(0, self.dtype)
        size = self.dtype.itemsize
        data = os.pread(self._fd, (hi - lo) * size, HEADER + lo * size)
        return np.frombuffer(data, self.dtype, len(data) // size)

    def take(self, index: np.ndarray) -> np.ndarray:
        """The values at ``index`` (any order, repeats allowed): each run of nearby positions read once, all the
        runs by one list of reads (no Python work per value)."""
        index = np.asarray(index, np.int64)
        if not index.size or self.file is None:
            return np.zeros(index.size, self.dtype)
        sampled = self._sampled(index)
        if sampled is not None:
            return sampled
        order = np.argsort(index, kind="stable")
        ordered = np.clip(index[order], 0, max(0, self.count - 1))
        size = self.dtype.itemsize
        first = np.concatenate([[0], np.flatnonzero(np.diff(ordered) * size > _GAP) + 1])
        lo = ordered[first]
        hi = np.append(ordered[first[1:] - 1], ordered[-1]) + 1
        data = b"".join([os.pread(self._fd, (b - a) * size, HEADER + (self.start + a) * size)
                         for a, b in zip(lo.tolist(), hi.tolist())])
        values = np.frombuffer(data, self.dtype, len(data) // size)
        run = np.repeat(np.arange(first.size), np.diff(np.append(first, ordered.size)))
        at = (np.cumsum(hi - lo) - (hi - lo))[run] + ordered - lo[run]
        out = np.empty(index.size, self.dtype)
        out[order] = values[np.minimum(at, max(0, values.size - 1))] if values.size else 0
        return out

    def searchsorted(self, keys: np.ndarray, side: str = "left") -> np.ndarray:
        """``np.searchsorted`` over this (sorted) column: the coarse index, then one slab read per key."""
        keys = np.asarray(keys)
        end = self.start + self.count
        if not self.count:
            return np.zeros(keys.shape, np.int64)
        slab = np.clip(np.searchsorted(self._coarse(end), keys, side) - 1, 0, None)
        out = np.empty(keys.shape, np.int64)
        for which in np.unique(slab).tolist():
            lo = which * STRIDE
            chosen = slab == which
            out[chosen] = lo + np.searchsorted(self._read(lo, min(end, lo + STRIDE + 1)), keys[chosen], side)
        return np.clip(out, self.start, end) - self.start  # the file is sorted throughout: clamp to this view

    def _sampled(self, index: np.ndarray) -> np.ndarray | None:
        """The values at ``index`` from the coarse sample when every one of them is a sampled position."""
        have = self._sample[0] if self._sample else None
        positions = index + self.start
        if have is None or (positions % STRIDE).any() or positions.max() // STRIDE >= len(have):
            return None
        return have[positions // STRIDE]

    def _coarse(self, end: int) -> np.ndarray:
        """The file's values at positions 0, STRIDE, 2·STRIDE, … below ``end``, read once and extended."""
        have = self._sample[0] if self._sample else np.zeros(0, self.dtype)
        wanted = (end + STRIDE - 1) // STRIDE
        if len(have) < wanted:
            extra = [self._read(i * STRIDE, i * STRIDE + 1) for i in range(len(have), wanted)]
            have = np.concatenate([have, *extra])
            self._sample[:] = [have]
        return have[:wanted]

