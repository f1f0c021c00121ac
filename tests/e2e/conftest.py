"""Fixtures for the real-terminal tests: a private tmux server per test, killed afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.tmux import Tmux


@pytest.fixture
def tmux(tmp_path: Path):
    """A private tmux server whose sessions start in ``tmp_path``."""
    server = Tmux(tmp_path)
    yield server
    server.close()
