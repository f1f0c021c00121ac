"""A second SIGINT that lands in a finalizer: no "Exception ignored" traceback, and the stop it asks for stands.

Seen under load: a burst of Ctrl-C during training, one landing while the garbage collector ran
multiprocessing's ``Finalize`` of a DataLoader queue, printed "Exception ignored in: <Finalize object, dead>"
and the KeyboardInterrupt's traceback (tests/engine/reliability/test_signals_repeated.py). Here the handler is
called as the signal module calls it, with the interrupted frame, from inside a ``__del__`` the collector runs.
"""

from __future__ import annotations

import signal
import sys

import pytest

from engine.app.signals import EngineSignals


class Controls:
    """What the handlers ask of the run: the stops, noted."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def request_graceful(self, reason: str, code) -> None:
        self.asked.append("graceful")

    def request_stop(self, reason: str) -> None:
        self.asked.append("at once")

    def interrupt_build(self) -> None:
        pass


class Collected:
    """An object whose finalizer the second SIGINT interrupts."""

    def __init__(self, signals: EngineSignals) -> None:
        self.signals = signals

    def __del__(self) -> None:
        self.signals.on_term(signal.SIGINT, sys._getframe())


@pytest.fixture
def unraisable(monkeypatch) -> list:
    """What Python would print as "Exception ignored in ..." (sys.unraisablehook), kept instead."""
    seen: list = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    return seen


def test_a_second_sigint_in_a_finalizer_raises_nothing_and_still_stops(tmp_path, unraisable) -> None:
    controls = Controls()
    signals = EngineSignals(controls, "continue", tmp_path / "engine.log", note=lambda text: None)
    with signals.interruptible():
        signals.on_term(signal.SIGINT, sys._getframe())
        Collected(signals)  # collected at once (no reference kept): its __del__ runs here
    assert [hook.exc_type for hook in unraisable] == []
    assert controls.asked == ["graceful", "at once"]


def test_a_second_sigint_in_the_training_itself_raises_keyboard_interrupt(tmp_path, unraisable) -> None:
    controls = Controls()
    signals = EngineSignals(controls, "continue", tmp_path / "engine.log", note=lambda text: None)
    with pytest.raises(KeyboardInterrupt), signals.interruptible():
        signals.on_term(signal.SIGINT, sys._getframe())
        signals.on_term(signal.SIGINT, sys._getframe())
    assert controls.asked == ["graceful", "at once"] and unraisable == []
