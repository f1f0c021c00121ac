"""RecordSink: the event sink that writes every step event into the run's step record, on the drainer thread.

It sits behind engine.run.offthread with the log, so the training thread pays for a queue append and
nothing more: the drainer hands it a pass's step events one by one (each is only buffered) and then calls
``drained``, which writes them as one batch (engine.run.steps.writer). A pass that ends with an urgent event (a
checkpoint, an eval) is drained on the emitting thread before ``emit`` returns, so the record holds every step
before a checkpoint when the checkpoint event is out, as the log does.

A resumed run's RunStarted carries the step it continues from: rows past it belong to the abandoned attempt and
are dropped (a step that goes back redoes from there anyway; this covers an attempt whose first logged step
lies past some abandoned ones). A start step of 0 drops nothing, so a framework that reports 0 for a resumed
run cannot wipe the record.

A failing disk (ENOSPC, EIO) never detaches it: the rows stay buffered, up to ``max_rows``, and every later
pass retries; ``warn`` is told once when writing starts to fail and once when it recovers (rows past the bound
are dropped and counted).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from engine.run.steps.writer import StepWriter

#: Step rows kept in memory while the disk refuses them (~1 KB each with their event: 64 MB at most).
MAX_ROWS = 1 << 16


class RecordSink:
    """Step events into the record in ``directory`` (see the module docstring)."""

    def __init__(self, directory: Path, warn: Callable[[str], None] | None = None, max_rows: int = MAX_ROWS) -> None:
        self.writer = StepWriter(directory)
        self.warn = warn
        self._max_rows = max_rows
        self._lock = threading.Lock()  # the drainer writes; the heartbeat's flush and close come from elsewhere
        self._failing: str | None = None
        self._dropped = 0

    def __call__(self, event) -> None:
        kind = event.type
        if kind == "step":
            with self._lock:
                if self.writer.pending < self._max_rows:
                    self.writer.append_event(event)
                else:
                    self._dropped += 1
        elif kind == "run_started" and event.start_step > 0:
            with self._lock:
                self._write(lambda: self.writer.truncate_after(event.start_step))

    def drained(self) -> None:
        """The drainer's pass is over: write its rows as one batch."""
        with self._lock:
            self._write(self.writer.flush)

    flush = drained

    def close(self) -> None:
        """Write what is left, bring the summary up to date and close the files."""
        with self._lock:
            self._write(self.writer.close)

    def _write(self, action: Callable[[], None]) -> None:
        try:
            action()
        except OSError as exc:
            if self._failing is None:
                self._failing = exc.strerror or str(exc)
                self._tell(f"{self.writer.directory}: cannot write the step record ({self._failing}); keeping up "
                           f"to {self._max_rows:,} steps in memory and retrying")
            return
        if self._failing is not None:
            lost = f"; {self._dropped:,} steps past the bound were dropped" if self._dropped else ""
            self._tell(f"{self.writer.directory}: the step record is writable again after '{self._failing}'{lost}")
            self._failing, self._dropped = None, 0

    def _tell(self, note: str) -> None:
        if self.warn is not None:
            self.warn(note)
