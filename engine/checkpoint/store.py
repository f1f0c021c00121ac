"""Which checkpoints a run directory holds and how to read each: a single file or a DCP directory.

The one place that knows both formats exist. ``candidates`` lists them;
``load_latest`` tries them newest first by the step each records (``last``
truncated, an intact ``best`` at step 100 beats ``last.prev`` at step 50:
taking the older one redid 50 steps), verifies each and says which damaged
ones it skipped, so a crash mid-save costs at most the save in flight. An
intact checkpoint of another run or task (``CheckpointMismatch``) stops the
search: it is refused, not skipped. Format details stay below: engine.checkpoint.format reads a file,
engine.checkpoint.dcp a sharded directory's sidecar.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

from safetensors import safe_open

from engine.checkpoint import dcp
from engine.checkpoint.format import CheckpointError, CheckpointMismatch, Loaded, validate_meta
from engine.checkpoint.format import read as read_file
from engine.core.safe_files import check_regular


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


def newest_first(paths: list[Path]) -> list[Path]:
    """``paths`` ordered by the step each records, newest first; ties (``last`` and ``best`` of one eval) keep
    their order. A file whose step cannot be read is damaged: it goes first, so it is tried, skipped and named in
    the run's log rather than passed over in silence."""
    steps = {path: _recorded_step(path) for path in paths}
    return sorted(paths, key=lambda path: -steps[path])


def _recorded_step(path: Path) -> float:
    """The step a checkpoint's header records (its metadata only: no tensor is read); infinity when unreadable."""
    if path.is_dir():
        name = path.resolve().name  # a DCP run's step-N directory (last and best link to one)
        return int(name[5:]) if name.startswith("step-") and name[5:].isdigit() else float("inf")
    try:
        check_regular(path)  # a FIFO in a checkpoint's place must not hang the ordering
        with safe_open(str(path), framework="pt") as handle:
            step = json.loads((handle.metadata() or {}).get("meta", "{}")).get("step")
    except Exception:  # any damage: format.read says which when the file is tried
        return float("inf")
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else float("inf")


def load_latest(directory: Path, check: Callable[[Loaded], None] | None = None,
                after: Path | None = None) -> Loaded:
    """The newest checkpoint in ``directory`` (``newest_first``) that verifies and passes ``check`` (which raises
    CheckpointError: skipped, listed in ``skipped``; CheckpointMismatch: raised). ``after``: only candidates
    after that file in this order."""
    skipped = []
    paths = newest_first(candidates(directory))
    if after is not None:
        names = [p.name for p in paths]
        paths = paths[names.index(Path(after).name) + 1:] if Path(after).name in names else paths
    for path in paths:
        try:
            loaded = read(path)
            (check or validate_meta)(loaded)
        except CheckpointMismatch:
            raise
        except CheckpointError as exc:
            skipped.append(str(exc))
            continue
        loaded.skipped = skipped
        return loaded
    if skipped:
        raise CheckpointError(f"{directory}: no usable checkpoint ({len(skipped)} damaged: {skipped[0]})")
    raise CheckpointError(f"{directory}: holds no checkpoint")
