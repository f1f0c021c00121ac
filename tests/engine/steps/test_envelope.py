"""The envelope is exact: every pixel column's min, max, last and NaN flag equal a brute-force pass over its raw values.

Seeded numpy loops (hypothesis is not installed): random lengths (across several pyramid levels), values with
NaN, +inf and -inf runs, rows written in random batches (so the pyramid grows piece by piece, as in a run),
dense fields, sparse names and names that appear mid-run, then random windows and column counts, down to
single steps and to more columns than steps.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine.run.steps import StepWriter, open_record
from engine.run.steps.envelope import column_edges
from engine.run.steps.layout import BASE, block_dtype, block_position, total_blocks
from engine.run.steps.writer import SUMMARY_EVERY


def _random_values(rng: np.random.Generator, n: int) -> np.ndarray:
    values = rng.normal(size=n) * 10 ** rng.uniform(-3, 3)
    for special in (np.nan, np.inf, -np.inf):
        if rng.random() < 0.7:  # scattered ones and a run of them
            values[rng.random(n) < rng.uniform(0, 0.05)] = special
            start = int(rng.integers(0, max(1, n)))
            values[start:start + int(rng.integers(0, 300))] = special
    return values


def _brute(steps: np.ndarray, values: np.ndarray, edges: np.ndarray):
    """Per column [edges[i], edges[i+1]): count, nanmin, nanmax, last, has-NaN, sum and count of the finite values,
    by a plain pass over its values."""
    out = []
    bounds = np.searchsorted(steps, edges, "left")
    for a, b in zip(bounds[:-1], bounds[1:]):
        inside = values[a:b]
        finite = inside[~np.isnan(inside)]
        out.append((len(inside), finite.min() if len(finite) else np.nan, finite.max() if len(finite) else np.nan,
                    inside[-1] if len(inside) else np.nan, bool(np.isnan(inside).any()),
                    float(inside[np.isfinite(inside)].sum()), int(np.isfinite(inside).sum())))
    return out


def _write(tmp_path, rng: np.random.Generator, n: int, close: bool):
    """A record of ``n`` rows with gaps in the steps: a dense field, a sparse name, a name from mid-run. Left
    open (``close`` false), the pyramids lag the values by up to SUMMARY_EVERY, as while a run writes."""
    steps = np.cumsum(rng.integers(1, 4, n)).astype(np.int64)
    loss = _random_values(rng, n).astype(np.float32)
    sparse_rows = np.flatnonzero(rng.random(n) < 0.3)
    sparse = _random_values(rng, len(sparse_rows)).astype(np.float32)
    late_from = int(rng.integers(0, n + 1))
    late = _random_values(rng, n - late_from).astype(np.float32)
    writer = StepWriter(tmp_path / "steps")
    sparse_at = dict(zip(sparse_rows.tolist(), sparse.tolist()))
    i = 0
    while i < n:
        batch = int(rng.integers(1, 400))
        for row in range(i, min(n, i + batch)):
            values = {"loss": float(loss[row])}
            if row in sparse_at:
                values["sparse"] = sparse_at[row]
            if row >= late_from:
                values["late"] = float(late[row - late_from])
            writer.append(int(steps[row]), values)
        writer.flush()
        i += batch
    if close:
        writer.close()
    truth = {"loss": (steps, loss), "sparse": (steps[sparse_rows], sparse), "late": (steps[late_from:], late)}
    return steps, truth, writer


@pytest.mark.parametrize("seed", range(8))
def test_the_envelope_equals_brute_force_over_random_windows_with_nan_and_inf(tmp_path, seed):
    rng = np.random.default_rng(seed)
    n = [0, 1, 128, 129, int(rng.integers(100, 3000)), int(rng.integers(100, 3000)), int(rng.integers(5000, 40000)),
         int(rng.integers(5000, 40000))][seed]
    steps, truth, writer = _write(tmp_path, rng, n, close=seed % 2 == 0)
    record = open_record(tmp_path)
    if seed % 2 and n > SUMMARY_EVERY:
        assert record.series("loss").summarised < n  # the live case: raw values past the pyramid
    assert record.rows == n
    checked = 0
    for _ in range(25):
        lo = int(rng.integers(-5, (steps[-1] if n else 0) + 5))
        wide = int(rng.integers(0, max(1, (steps[-1] if n else 10) - lo + 10)))
        hi = lo + (wide if rng.random() < 0.6 else int(rng.integers(0, 40)))  # down to single steps
        columns = int(rng.choice([1, 2, 7, int(rng.integers(1, 400)), min(1500, max(1, hi - lo + 3))]))
        edges = column_edges(lo, hi, columns)
        edges_closed = edges.copy()
        edges_closed[-1] = hi + 1
        for name, (at, values) in truth.items():
            if name not in record.names():
                assert len(values) == 0
                continue
            got = record.envelope(name, lo, hi, columns)
            want = _brute(at, values.astype(np.float64), edges_closed)
            assert got.x.tolist() == edges[:-1].tolist()
            assert got.count.tolist() == [w[0] for w in want]
            np.testing.assert_array_equal(got.min, [w[1] for w in want])
            np.testing.assert_array_equal(got.max, [w[2] for w in want])
            np.testing.assert_array_equal(got.last, [w[3] for w in want])
            assert got.nan.tolist() == [w[4] for w in want]
            assert got.finite.tolist() == [w[6] for w in want]
            np.testing.assert_allclose(got.sum, [w[5] for w in want], rtol=1e-9, atol=1e-300)
            checked += 1
    assert checked or n == 0
    writer.close()


def test_a_wide_column_reads_pyramid_blocks_not_raw_values(tmp_path):
    """Over 300,000 values in 3 columns the envelope touches a few dozen block records and ≤ 254 raw values per
    column; a pyramid made wrong (a block's max set too high) shows up in the answer, so the blocks are used."""
    n = 300_000
    rng = np.random.default_rng(7)
    values = rng.normal(size=n).astype(np.float32)
    writer = StepWriter(tmp_path)
    writer.append_columns(np.arange(1, n + 1), {"loss": values})
    writer.close()
    record = open_record(tmp_path)
    exact = record.envelope("loss", 1, n, 3)
    assert exact.max.tolist() == [float(values[i:j].max()) for i, j in ((0, 100_000), (100_000, 200_000),
                                                                        (200_000, n))]
    summary = tmp_path / "0.p"
    blocks = np.memmap(summary, block_dtype(np.dtype("<f4")), "r+", 64, (total_blocks(n),))
    blocks["max"][block_position(16, np.array([2]))] = 1e9  # steps 131,073–196,608: inside column 2, and used
    blocks.flush()
    del blocks
    assert open_record(tmp_path).envelope("loss", 1, n, 3).max.tolist() == [exact.max[0], 1e9, exact.max[2]]


def test_block_positions_follow_the_order_blocks_complete_in():
    order = [(k, end // (1 << k) - 1) for end in range(1, 20_000) for k in range(BASE, 16) if end % (1 << k) == 0]
    for k in range(BASE, 16):
        index = np.array([i for level, i in order if level == k])
        expected = [p for p, (level, _) in enumerate(order) if level == k]
        assert block_position(k, index).tolist() == expected
    sizes = (0, (1 << BASE) - 1, 1 << BASE, 2 << BASE, 20_000)
    assert [total_blocks(n) for n in sizes] == [sum(1 for k, i in order if (i + 1) << k <= n) for n in sizes]
