"""Cached block reduction of the full history: exact envelope, bounded points, cache reuse, rewinds."""

from __future__ import annotations

import numpy as np

from tui.model.history import Ring
from tui.model.plot_blocks import BlockReducer


def _grow(ring: Ring, rng, step: int, k: int) -> int:
    rows = np.stack([np.arange(step, step + k, dtype=float), rng.standard_normal(k)], 1)
    ring.append_many(rows)
    return step + k


def test_envelope_is_exact_while_the_ring_grows_wraps_and_rewinds() -> None:
    rng = np.random.default_rng(0)
    ring, minmax, mean = Ring(1000, 2), BlockReducer("minmax"), BlockReducer("mean")
    step = 0
    for it in range(300):
        step = _grow(ring, rng, step, int(rng.integers(1, 40)))
        if it % 50 == 7:
            ring._data[1, (ring._start + ring._len - 1) % ring.capacity] = np.nan  # a skipped (NaN) step
        if it % 97 == 5:
            ring.drop_newest(3)
        x, y = minmax.reduce(ring, 1, 0, 70)
        truth = ring.column(1)
        truth = truth[np.isfinite(truth)]
        assert y.min() == truth.min() and y.max() == truth.max(), it  # no spike is ever lost
        assert len(x) <= 140 and np.all(np.diff(x) >= 0), it
        xm, ym = mean.reduce(ring, 1, 0, 70)
        assert len(xm) <= 70 and np.all(np.diff(xm) >= 0) and truth.min() <= ym.min() <= ym.max() <= truth.max()


def test_a_frame_only_reduces_the_blocks_that_changed() -> None:
    rng = np.random.default_rng(1)
    ring, reducer = Ring(1 << 20, 2), BlockReducer("minmax")
    step = _grow(ring, rng, 0, 600_000)
    reducer.reduce(ring, 1, 0, 70)
    first = reducer.reduced
    step = _grow(ring, rng, step, 50)  # a few more steps between two frames
    reducer.reduce(ring, 1, 0, 70)
    assert first <= 70 and reducer.reduced - first <= 3  # the growing tail (and maybe one completed block)


def test_a_rewind_drops_the_cache() -> None:
    rng = np.random.default_rng(2)
    ring, reducer = Ring(10_000, 2), BlockReducer("minmax")
    _grow(ring, rng, 0, 5000)
    reducer.reduce(ring, 1, 0, 50)
    ring.drop_newest(4000)  # a resumed run went back to an earlier checkpoint
    ring.append_many(np.stack([np.arange(1000, 1100, dtype=float), np.full(100, 99.0)], 1))
    x, y = reducer.reduce(ring, 1, 0, 50)
    assert y.max() == 99.0 and 1000 < x.max() <= 1099  # the new rows are there, the dropped ones are not
    assert not ((x > 1099) & (x < 5000)).any()
