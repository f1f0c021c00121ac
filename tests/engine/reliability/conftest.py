"""Fixtures of the fault-injection tests: one preloaded fork server per session (see forkserver.py)."""

from __future__ import annotations

import pytest

from tests.engine.reliability.harness import ForkServer


@pytest.fixture(scope="session")
def engines():
    """Starts engine processes (real, forked from a preloaded interpreter); closed at the end of the session."""
    server = ForkServer()
    yield server
    server.close()
