"""How a screen hears back from the engine: it sends from its own thread worker, and the answer comes back to it as
an ``Answered`` message (the tune and autotune screens).

``link(request)`` is the dashboard's ControlLink (tui.dashboard.controls): a blocking send that returns the
engine's ack, raises with one line when there is none, and tells the app of every real request's answer itself,
so a screen closed before its answer came loses nothing the app shows.
"""

from __future__ import annotations

from typing import Callable

from textual.message import Message

from engine.run.control.requests import Request
from engine.run.events import Event
from tui.model.format import one_line

#: A blocking send of one request to the engine, returning its ack.
Link = Callable[[Request], Event]


class Answered(Message, bubble=False):
    """The engine's answer to a request a screen sent: ``ack``, or ``error`` says why there is none."""

    def __init__(self, request: Request, ack: Event | None, error: str | None = None) -> None:
        super().__init__()
        self.request, self.ack, self.error = request, ack, error


def ask(link: Link, request: Request) -> Answered:
    """Send ``request`` through ``link`` (blocking: call it from a thread worker) and wrap what came back."""
    try:
        return Answered(request, link(request))
    except Exception as exc:  # noqa: BLE001 - no answer: said by the screen, never raised into Textual
        return Answered(request, None, one_line(exc))
