"""A finished run read once for the compare overlay: its whole history folded into a RunModel.

The overlay needs the same series a live run has (loss, every per-step scalar,
every validation metric), so the other run goes through the same fold as an
attach: ``engine.run.history.read.read_history`` then ``RunModel.ingest``. It is read
on a thread worker and never updated (a compare run is history).
"""

from __future__ import annotations

from pathlib import Path

from tui.model.dashboard import RunModel


def read_run(path: str | Path, capacity: int = 1 << 20) -> RunModel:
    """The run at ``path`` (a run directory or its events.jsonl) as a model; OSError/ValueError naming the path."""
    from engine.run.history import read_history

    path = Path(path)
    events = path / "events.jsonl" if path.is_dir() else path
    if not events.is_file():
        raise ValueError(f"{path}: not a run (no events.jsonl)")
    model = RunModel(capacity)
    model.ingest(read_history(events))
    if model.started is None and not len(model.steps):
        raise ValueError(f"{events}: no run in it (no RunStarted, no steps)")
    return model
