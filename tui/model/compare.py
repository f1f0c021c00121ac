"""A finished run read once for the compare overlay: a RunModel over its step record and its events.

The overlay needs the same series a live run has (loss, every per-step scalar,
every validation metric), so the other run is opened as an attach opens one:
its step record (converted first from the log of a run older than the record,
tui.model.step_open), and the other events of its events.jsonl, without the step
lines (engine.run.history.read_history). Each chart then reads the envelope it
draws, so overlaying a 100M-step run costs what overlaying a short one does. It
is read on a thread worker and never updated (a compare run is history).
"""

from __future__ import annotations

from pathlib import Path

from tui.model.dashboard import SAMPLE_COLUMNS, SAMPLES_KEPT, RunModel


def read_run(path: str | Path) -> RunModel:
    """The run at ``path`` (a run directory or its events.jsonl) as a model; OSError/ValueError naming the path."""
    from engine.run.history import read_history
    from tui.model.step_open import open_or_convert

    path = Path(path)
    events = path / "events.jsonl" if path.is_dir() else path
    if not events.is_file():
        raise ValueError(f"{path}: not a run (no events.jsonl)")
    model = RunModel()
    source = open_or_convert(events.parent, apart=True)
    if source is not None:
        model.open_steps(source)
    model.ingest(read_history(events, steps=source is None, newest=SAMPLES_KEPT, columns=SAMPLE_COLUMNS))
    if model.started is None and not model.step_count:
        raise ValueError(f"{events}: no run in it (no RunStarted, no steps)")
    return model
