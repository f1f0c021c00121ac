"""Fixtures for the gap-filler's tests: a tiny synthetic data set, generated once per session."""

from __future__ import annotations

import pytest
from gapfill_helpers import TINY  # pytest puts this test directory on sys.path


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    """A generated data directory (shared by the session: generation is the slow part)."""
    from engine.tasks.gapfill import synth

    out = tmp_path_factory.mktemp("gapfill") / "data"
    synth.generate(out, **TINY)
    return out


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """One intra-op thread: these tests are tiny, and on a shared 2-core box a second thread only spins."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
