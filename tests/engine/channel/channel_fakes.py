"""A torch-free stand-in for the Trainer: steps on a timer, drains Controls at each boundary, acks on the bus."""

from __future__ import annotations

import threading
import time

from engine.run import events as ev
from engine.run.control.requests import Controls
from engine.run.sinks import EventBus


class FakeEngine:
    """Emits a StepLogged every ``interval`` s unless paused; answers requests like the real loop does."""

    def __init__(self, bus: EventBus, controls: Controls, interval: float = 0.005, answer: bool = True) -> None:
        self.bus, self.controls, self.interval, self.answer = bus, controls, interval, answer
        self.step = 0
        self.paused = False
        self.received: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "FakeEngine":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            for request in self.controls.drain():
                self.received.append(request)
                if self.answer:
                    self._apply(request)
            if self.paused:
                self.controls.wait(0.05)
                continue
            self.step += 1
            self.bus.emit(ev.StepLogged(step=self.step, loss=1.0 / self.step))
            time.sleep(self.interval)

    def _apply(self, request) -> None:
        if request.action == "set" and request.name == "attn_backend":
            self.bus.emit(ev.Refused(request=request.to_dict(), why="task 'toy' has no attn_backend setting",
                                     step=self.step, request_id=request.id))
            return
        if request.action in ("pause", "resume"):
            old, self.paused = self.paused, request.action == "pause"
            self.bus.emit(ev.SettingChanged(name="state", old="paused" if old else "running",
                                            new="paused" if self.paused else "running", step=self.step,
                                            request_id=request.id))
            return
        self.bus.emit(ev.SettingChanged(name=request.name or request.action, old=None, new=request.value,
                                        step=self.step, request_id=request.id))
