"""Reading a live run from a benchmark: step times, a steady window, waiting for a step.

Throughput is measured from the engine's own record (each StepLogged has the
wall time ``t`` it was logged at), so every variant — headless, under the
dashboard, in-process — is timed by the same clock and the same code, and
start-up, the step-0 baseline eval and the final checkpoint fall outside the
window by construction. Every step's time comes from the run's step record
(engine.run.steps: events.jsonl keeps a step line a second); the log says
when the run finished, and gives the steps of a run without a record.
"""

from __future__ import annotations

import json
import time
from pathlib import Path


class EventsFile:
    """Incremental reader of one run: its events.jsonl (``path``; the file may not exist yet, partial last lines
    wait) and the step record beside it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""
        self._record = None  # the run's step record once it is there (engine.run.steps.StepRecord)
        self._logged: list[tuple[int, float]] = []  # the log's step lines: every step of a run without a record
        #: (step, t) of every StepLogged read so far.
        self.steps: list[tuple[int, float]] = []
        self.finished = False

    def read(self) -> None:
        """Take in whatever was appended since the last call."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return
        self._offset += len(data)
        data = self._partial + data
        *lines, self._partial = data.split(b"\n")
        for line in lines:  # a few lines a second: parsing each costs nothing next to the run
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("type") == "step":
                self._logged.append((event["step"], event["t"]))
            elif event.get("type") == "run_finished":
                self.finished = True
        self._read_record()

    def _read_record(self) -> None:
        """Take in the record's new rows (its steps replace the log's step lines once it exists)."""
        from engine.run.steps import open_record

        if self._record is None:
            try:
                self._record = open_record(self.path.parent)
            except FileNotFoundError:
                self.steps = self._logged
                return
            self.steps = []
        self._record.refresh()
        after = self.steps[-1][0] + 1 if self.steps else 0
        try:
            steps, times = self._record.window("t", after, 2**62)
        except KeyError:  # a record just created: no series in its catalogue yet
            return
        self.steps.extend(zip(steps.tolist(), times.tolist()))

    def last_step(self) -> int:
        """The newest logged step (0 before the first)."""
        return self.steps[-1][0] if self.steps else 0

    def wait_step(self, step: int, timeout: float, alive=lambda: True) -> float | None:
        """Poll (every 50 ms) until ``step`` is logged; its ``t``, or None on timeout / when ``alive()`` is False."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.read()
            for s, t in reversed(self.steps):
                if s == step:
                    return t
                if s < step:
                    break
            if self.finished or not alive():
                self.read()
                return next((t for s, t in self.steps if s == step), None)
            time.sleep(0.05)
        return None

    def wait_finished(self, timeout: float, alive=lambda: True) -> bool:
        """Poll until RunFinished is logged (False on timeout or when ``alive()`` turns False first)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.read()
            if self.finished:
                return True
            if not alive():
                self.read()
                return self.finished
            time.sleep(0.1)
        return False


def window(total_steps: int, start_frac: float, end_frac: float, min_start: int = 3) -> tuple[int, int]:
    """The steady window [lo, hi] in steps: after warm-up (≥ ``min_start``), before the end's eval/checkpoint."""
    lo = max(min_start, int(round(total_steps * start_frac)))
    hi = max(lo + 2, int(round(total_steps * end_frac)))
    return lo, hi


def steps_per_s(steps: list[tuple[int, float]], lo: int, hi: int) -> float:
    """Steps per second between the log times of steps ``lo`` and ``hi`` (NaN if either is missing)."""
    times = {s: t for s, t in steps}
    if lo not in times or hi not in times or times[hi] <= times[lo]:
        return float("nan")
    return (hi - lo) / (times[hi] - times[lo])


def recorded(run_dir: Path, name: str = "t") -> dict[int, float]:
    """Step → value of one metric (each step's wall time by default) from the run's step record ({} without one)."""
    from engine.run.steps import open_record

    try:
        with open_record(run_dir) as record:
            steps, values = record.window(name, 0, 2**62)
    except (FileNotFoundError, KeyError):
        return {}
    return dict(zip(steps.tolist(), values.tolist()))
