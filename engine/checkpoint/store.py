"""Which checkpoints a run directory holds and how to read each: a single file or a DCP directory.

The one place that knows both formats exist. ``candidates`` orders them the
way a resume should try them; ``load_latest`` verifies each in that order and
says which damaged ones it skipped, so a crash mid-save costs at most the save
in flight. Format details stay below: engine.checkpoint.format reads a file,
engine.checkpoint.dcp a sharded directory's sidecar.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from engine.checkpoint import dcp
from engine.checkpoint.format import CheckpointError, Loaded, validate_meta
from engine.checkpoint.format import read as read_file


def read(path: Path) -> Loaded:
    """Load and verify one checkpoint: a file, or a DCP directory (its sidecar now, its shards when applied)."""
    path = Path(path)
    return dcp.read_sidecar(path) if path.is_dir() else read_file(path)


def candidates(directory: Path) -> list[Path]:
    """Checkpoints in the order a resume should try them: last, last.prev, step-N newest first, best; then an
    FSDP2 run's committed DCP directories (``step-N/`` with DCP's ``.metadata``), newest first."""
    directory = Path(directory)
    steps = sorted(directory.glob("step-*.safetensors"), reverse=True)
    ordered = [directory / "last.safetensors", directory / "last.prev.safetensors", *steps,
               directory / "best.safetensors"]
    # `last` and `best` of a DCP run are links to step directories: the step directories themselves are the
    # candidates, newest first, so a save cut off before its pointer moved is still found.
    sharded = sorted((p for p in directory.glob("step-*") if not p.is_symlink() and p.is_dir() and dcp.complete(p)),
                     reverse=True)
    # Present in any form: a FIFO or a link to a device under a checkpoint's name is a damaged candidate
    # (format.read refuses it), not an absent one a resume would pass over and start the run again beside.
    return [p for p in ordered if os.path.lexists(p) and not p.is_dir()] + sharded


def load_latest(directory: Path, check: Callable[[Loaded], None] | None = None,
                after: Path | None = None) -> Loaded:
    """The newest checkpoint in ``directory`` that verifies (and passes ``check``, which raises CheckpointError);
    skipped ones are listed in ``skipped``. ``after``: only candidates older than that file."""
    skipped = []
    paths = candidates(directory)
    if after is not None:
        names = [p.name for p in paths]
        paths = paths[names.index(Path(after).name) + 1:] if Path(after).name in names else paths
    for path in paths:
        try:
            loaded = read(path)
            (check or validate_meta)(loaded)
        except CheckpointError as exc:
            skipped.append(str(exc))
            continue
        loaded.skipped = skipped
        return loaded
    if skipped:
        raise CheckpointError(f"{directory}: no usable checkpoint ({len(skipped)} damaged: {skipped[0]})")
    raise CheckpointError(f"{directory}: holds no checkpoint")
