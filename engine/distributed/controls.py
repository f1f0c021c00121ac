"""Controls every rank applies at the same step: rank 0's requests and any rank's stop, agreed at each boundary.

Only rank 0 serves the control socket, and signals reach each rank on its own
(torchrun forwards SIGTERM to all, a stray one may reach one). If each rank
acted on what it saw, one rank would pause or stop while another waited for it
in a collective. So a signal or request only *records* a wish here; at each
step boundary ``drain`` (called by the loop on every rank, in step) gathers
every rank's pending stop and rank 0's request list in one small object
collective, and only then sets the stop events and returns the requests, on
every rank alike. ``stopping()`` answers from that agreed snapshot too, so an
evaluation cut short by a stop is cut on every rank at the same batch.

Cost: one ``all_gather_object`` a step (a few hundred bytes; ~1 ms on gloo
over loopback).
"""

from __future__ import annotations

from engine.run.control.requests import Controls, Request


class AgreedControls(Controls):
    """A ``Controls`` mailbox whose effects are agreed across ranks at each ``drain``."""

    def __init__(self, group) -> None:
        """``group`` is the strategy (engine.distributed.parallel.Ddp): rank, world and its collectives."""
        super().__init__()
        self.group = group
        self._pending_stop: str | None = None
        self._pending_graceful: tuple[str, int] | None = None
        self._step = lambda: 0
        self._emit = lambda event: None

    def bind(self, step, emit) -> None:
        """``step()`` is the run's step count and ``emit`` its event bus: a boundary that applies requests
        gathers every rank's telemetry there, so the events show each control landing on every rank at once."""
        self._step, self._emit = step, emit

    def request_graceful(self, reason: str, exit_code: int) -> None:
        """Recorded; every rank checkpoints and stops after the next boundary agrees on it."""
        if self._pending_graceful is None:
            self._pending_graceful = (reason, exit_code)
        self._wake.set()

    def request_stop(self, reason: str) -> None:
        """Recorded; every rank stops after the next boundary agrees on it."""
        self._pending_stop = reason
        self._wake.set()

    def drain(self) -> list[Request]:
        """Rank 0's queued requests and every rank's stop wish, the same on every rank (a collective)."""
        mine = super().drain() if self.group.rank == 0 else []
        wish = {"requests": [r.to_dict() for r in mine], "stop": self._pending_stop, "graceful": self._pending_graceful}
        import torch.distributed as dist

        everyone: list = [None] * self.group.world
        with self.group.collective("control agreement"):
            dist.all_gather_object(everyone, wish)
        for w in everyone:
            if w["stop"] and not self.stop_event.is_set():
                self.stop_reason = w["stop"]
                self.stop_event.set()
            if w["graceful"] and not self.graceful_event.is_set():
                self.graceful_reason, self.graceful_exit_code = w["graceful"]
                self.graceful_event.set()
        requests = mine if self.group.rank == 0 else [Request.from_dict(d) for d in everyone[0]["requests"]]
        if requests:  # every rank has them: the gather below is matched on every rank
            event = self.group.sample(self._step(), "control")
            if event is not None:
                self._emit(event)
        return requests

    def stopping(self) -> bool:
        """True once a stop was agreed (not merely wished on this rank), so every rank sees it at once."""
        return self.stop_event.is_set() or self.graceful_event.is_set()
