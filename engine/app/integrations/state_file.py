"""The plain loop's default save, ``checkpoints/last.pt``, with the engine's safety: bounded reading, the previous
good file to fall back to, and no temporary file outliving its writer.

- **Writing.** ``{"step", "model", "optimizer"}`` state dicts with
  ``torch.save`` into ``.last.pt.tmp-<pid>`` beside it, fsynced, then renamed
  over ``last.pt`` (the directory fsynced too): a crash never leaves half a
  file under the real name. Before that rename, a ``last.pt`` known good (this
  process wrote it or read it whole) becomes ``last.prev.pt``; one that failed
  to read is replaced, never rotated over a good ``last.prev.pt``.
- **Reading.** ``last.pt``, else ``last.prev.pt``: each opened as a regular
  file only (engine.core.safe_files: a FIFO in its place is refused instead of
  hanging ``torch.load`` for ever, ``/dev/zero`` instead of unpickling it) and
  loaded with ``weights_only=True`` (tensors and plain values: nothing else is
  unpickled). A file that does not load is skipped with a line naming it and
  why; when none loads, one line names each, and the run does not start (the
  files may be recoverable: nothing is overwritten).
- **Dead writers.** A kill -9 mid-save leaves ``.last.pt.tmp-<pid>``; every
  save and every start removes those whose pid is gone (the engine's rule,
  engine.checkpoint.format.remove_stale_temps), so a run killed often does not
  fill the disk a checkpoint at a time.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

#: The default save's file, its previous good version, and its writers' temporary files (under checkpoints/).
LAST, PREVIOUS = "last.pt", "last.prev.pt"
TEMPORARY = f".{LAST}.tmp-*"


class StateFileError(Exception):
    """No saved state could be read although files are there; one line naming each and why."""


class StateFile:
    """``last.pt`` and ``last.prev.pt`` of one run directory's ``checkpoints/`` (module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        #: True when ``last.pt`` on disk is known good: a save may then rotate it to ``last.prev.pt``.
        self.trusted = False

    @property
    def path(self) -> Path:
        """Where the newest state goes."""
        return self.directory / LAST

    def remove_dead_writers(self) -> int:
        """Delete the temporary files of writers that are gone; how many."""
        from engine.checkpoint.format import remove_stale_temps

        return remove_stale_temps(self.directory, TEMPORARY) if self.directory.is_dir() else 0

    def write(self, state: dict[str, Any]) -> Path:
        """Write ``state`` atomically as ``last.pt`` (the previous good one kept as ``last.prev.pt``); OSError and
        torch's errors pass to the caller, with the temporary file removed. The temporary file is a new one
        (``O_EXCL``) opened through no link (engine.core.safe_files.open_for_write): a link planted under its
        name is refused, never written through."""
        import torch

        from engine.core.safe_files import fsync_dir, open_for_write

        self.directory.mkdir(mode=0o700, exist_ok=True)
        self.remove_dead_writers()
        temporary = self.directory / f".{LAST}.tmp-{os.getpid()}"
        try:
            temporary.unlink(missing_ok=True)  # our own pid's (a reused pid), or anything planted there
            with os.fdopen(open_for_write(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as handle:
                torch.save(state, handle)
                handle.flush()
                os.fsync(handle.fileno())
            if self.trusted and self.path.exists():
                os.replace(self.path, self.directory / PREVIOUS)
            os.replace(temporary, self.path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        fsync_dir(self.directory)  # the renames themselves survive a power cut
        self.trusted = True
        return self.path

    def read(self) -> tuple[dict, Path, list[str]] | None:
        """(the newest state that loads, its path, a line for each newer file passed over); None when there is
        no saved state. StateFileError when files are there and none loads."""
        self.remove_dead_writers()
        passed: list[str] = []
        for name in (LAST, PREVIOUS):
            path = self.directory / name
            state, problem = _load(path)
            if state is not None:
                self.trusted = name == LAST
                return state, path, passed
            if problem:
                passed.append(problem)
        if passed:
            raise StateFileError("; ".join(passed) + ": no saved state to resume from (move these files out of "
                                 "checkpoints/ to start afresh, or pass resume=False)")
        return None


def _load(path: Path) -> tuple[dict | None, str]:
    """(the state in ``path``, "") or (None, why not: "" when there is no such file)."""
    import pickle

    import torch

    from engine.core.safe_files import open_regular

    try:
        handle = open_regular(path)  # never blocks on a FIFO, never reads a device
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"{path}: not a checkpoint file ({exc.strerror or exc})"
    try:
        with handle, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's notes on a foreign pickle: the refusal below says it once
            state = torch.load(handle, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:  # torch's paragraph: its one line that says what was refused
        _, _, told = str(exc).partition("WeightsUnpickler error:")
        lines = [line.strip() for line in told.splitlines() if line.strip()]
        why = lines[0].split(". ")[0] if lines else type(exc).__name__
        return None, f"{path}: not a readable checkpoint (it would unpickle more than tensors: {why[:120]})"
    except (RuntimeError, EOFError, ValueError, OSError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return None, f"{path}: not a readable checkpoint ({first[:160]})"
    if not isinstance(state, dict) or isinstance(state.get("step", 0), bool) \
            or not isinstance(state.get("step", 0), int) or state.get("step", 0) < 0:
        return None, f"{path}: not this loop's saved state (a dict with a step, the model's and optimizer's state)"
    return state, ""
