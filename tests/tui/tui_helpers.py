"""Helpers for the dashboard tests: a scripted session (the demo memory model), and polling instead of sleeping.

No pytest-asyncio here: ``pilot_test`` runs an async test body with asyncio.run.
"""

from __future__ import annotations

import asyncio
import functools
import time

from tui.app import DashboardApp
from tui.scripted import ScriptedSession, demo_memory, demo_run


async def wait_for(pilot, predicate, what: str, timeout: float = 8.0) -> None:
    """Poll ``predicate`` while the app runs; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await pilot.pause(0.02)


async def loaded(pilot, app: DashboardApp, steps: int = 300) -> None:
    """Wait until the scripted history is on the model and the session is connected."""
    await wait_for(pilot, lambda: app.model.step == steps and app.session is not None, "history loaded")


def make(session: ScriptedSession | None = None, **kwargs) -> tuple[DashboardApp, ScriptedSession]:
    """A dashboard on a scripted 300-step run whose engine predicts memory with ``demo_memory``."""
    session = session or ScriptedSession(history=demo_run(300), memory=demo_memory)
    return DashboardApp(lambda: session, **kwargs), session


def pilot_test(fn):
    """Run an ``async def`` test with asyncio.run (one event loop per test)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    return wrapper
