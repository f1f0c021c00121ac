"""Helpers for the dashboard tests: a scripted session (the demo memory model), the app opened under Pilot with
its history loaded, polling instead of sleeping, and a run's log written as the engine writes it.

No pytest-asyncio here: ``pilot_test`` runs an async test body with asyncio.run.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from pathlib import Path
from typing import Iterable

from engine.run import events as ev
from engine.run.history import History, read_history
from engine.run.sinks import JsonlSink
from tui.dashboard.app import DashboardApp
from tui.dashboard.scripted import ScriptedSession, demo_autotune, demo_memory, demo_run

#: Candidates the demo search has measured when its table is first shown (of the seven it measures).
MID_SEARCH = 4


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


@contextlib.asynccontextmanager
async def opened(app: DashboardApp, size: tuple[int, int] = (120, 40), steps: int = 300):
    """``app.run_test(size)`` with the scripted ``steps``-step history on the model and the session connected."""
    async with app.run_test(size=size) as pilot:
        await loaded(pilot, app, steps)
        yield pilot


async def on_screen(pilot, name: str) -> None:
    """Wait until the top screen is the one called ``name`` (a modal opened, or closed back to the dashboard) and
    mounted: a pushed screen is on top before the widgets it composes exist, and a test touching them then races
    the mount (seen under load as NoMatches from the screen's own on_mount)."""
    await wait_for(pilot, lambda: type(pilot.app.screen).__name__ == name and pilot.app.screen.is_mounted,
                   f"the {name}")


async def burst(pilot, *keys: str) -> None:
    """Send ``keys`` as a terminal delivers a fast typist's keys read together: every key event reaches the app
    before the first is handled (``pilot.press`` waits for the app to go idle after each key, which hides what a
    burst does), then wait until the app is idle again."""
    import unicodedata

    from textual import events
    from textual.keys import _get_unicode_name_from_key

    app = pilot.app
    for key in keys:
        try:
            char = unicodedata.lookup(_get_unicode_name_from_key(key))
        except KeyError:
            char = key if len(key) == 1 else None
        event = events.Key(key, char)
        event.set_sender(app)
        app._driver.send_message(event)
    await pilot.pause(0.3)


def logged(events: Iterable[ev.Event], directory: Path) -> History:
    """``events`` written to ``directory``/events.jsonl by the engine's sink, read back as a viewer reads them: every
    step's line, as a run without a step record logs them (the viewer then takes its steps from the log)."""
    sink = JsonlSink(Path(directory) / "events.jsonl", step_every_s=0)
    for event in events:
        sink(event)
    sink.close()
    return read_history(Path(directory) / "events.jsonl")


def make(session: ScriptedSession | None = None, **kwargs) -> tuple[DashboardApp, ScriptedSession]:
    """A dashboard on a scripted 300-step run whose engine predicts memory with ``demo_memory``."""
    session = session or ScriptedSession(history=demo_run(300), memory=demo_memory)
    return DashboardApp(lambda: session, **kwargs), session


def searching(measured: int = MID_SEARCH) -> tuple[DashboardApp, ScriptedSession]:
    """A dashboard on the demo run with an autotune search from step 300 that has measured ``measured``
    candidates (tui.dashboard.scripted.demo_autotune: long setting names, rates in tokens/s)."""
    run = demo_run(300)
    session = ScriptedSession(history=run + demo_autotune(300, run[-1].t, measured=measured), memory=demo_memory,
                              detachable=True, run_dir="runs/demo-run")
    return DashboardApp(lambda: session), session


def finish_search(session: ScriptedSession) -> None:
    """The rest of the demo search arrives (``searching``): three more candidates and the choice."""
    done = demo_autotune(300, session.last_t - 4.0 * MID_SEARCH, measured=7, finished=True)
    session.push(*done[1 + MID_SEARCH:])


def dialog_rows(app: DashboardApp, dialog: str) -> list[str]:
    """The rows of the modal's dialog ``dialog`` (a selector) as the terminal shows them, inside its border."""
    from tests.tui.screens import screen_text

    region = app.screen.query_one(dialog).region
    lines = screen_text(app)
    return [lines[y][region.x + 1:region.right - 1] for y in range(region.y + 1, region.bottom - 1)]


def pilot_test(fn):
    """Run an ``async def`` test with asyncio.run (one event loop per test)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    return wrapper
