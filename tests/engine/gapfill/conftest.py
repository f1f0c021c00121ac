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
