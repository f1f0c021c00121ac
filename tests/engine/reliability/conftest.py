"""Fixtures of the fault-injection tests: one preloaded fork server per session (see forkserver.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def engines(forks):
    """Starts engine processes (real, forked from a preloaded interpreter): the session's server (tests/conftest)."""
    return forks
