"""Ring buffers and the vectorised EMA."""

from __future__ import annotations

import numpy as np

from tui.model.ema import EmaState, ema_extend
from tui.model.history import Ring


def test_ring_keeps_the_newest_rows_in_order_across_wraps():
    ring = Ring(5, width=2)
    for start in range(0, 12, 3):  # appends of 3 rows: wraps twice
        rows = np.array([[i, i * 10] for i in range(start, start + 3)], dtype=float)
        ring.append_many(rows)
    view = ring.view()
    assert view[:, 0].tolist() == [7, 8, 9, 10, 11]
    assert ring.view(last=2)[:, 1].tolist() == [100, 110]
    assert ring.total == 12 and len(ring) == 5
    ring.append_many(np.arange(20, dtype=float).reshape(10, 2))  # one batch bigger than the ring
    assert ring.view()[:, 0].tolist() == [10, 12, 14, 16, 18]


def test_vectorised_ema_matches_the_recursion_and_skips_nan():
    rng = np.random.default_rng(0)
    x = rng.random(5000)
    x[::37] = np.nan
    for a in (0.6, 0.9, 0.99):
        state = EmaState()
        got = np.concatenate([ema_extend(x[:1234], a, state), ema_extend(x[1234:], a, state)])
        mean, count, want = 0.0, 0, []
        for v in x:
            if np.isnan(v):
                want.append(np.nan)
                continue
            mean = a * mean + (1 - a) * v
            count += 1
            want.append(mean / (1 - a ** count))
        assert np.allclose(got, want, equal_nan=True, rtol=1e-9, atol=1e-12)
