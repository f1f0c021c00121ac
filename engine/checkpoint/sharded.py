"""The checkpoint manager of an FSDP2 run: every save a DCP ``step-N/`` directory, ``last``/``best`` links to them.

Cadence, restore and rollback are the single-file Checkpointer's; what differs is the write:

1. rank 0 prepares the directory (a cut-off or stale one of the same step is removed, and a link to it
   dropped first) and writes the sidecar (engine.checkpoint.dcp) atomically; every rank agrees it could
   (the barrier: no shard is written into a directory still being cleared);
2. every rank writes its shards (``dcp.save``, a collective), DCP renames ``.metadata`` into place last,
   and every rank agrees it succeeded;
3. rank 0 moves ``last`` (and ``best`` for a best save) to the new directory by an atomic symlink
   rename, so the links only ever name committed directories, and prunes.

A second save at a step already written by this process since its last restore (``best`` then ``last``
after one eval; a ``step`` save) rewrites only the sidecar and moves the links: the weights are the same.

Pruning: the newest ``max(2, keep_last)`` committed directories stay (``last`` and the one before it, as
``last.prev`` does for files), and whatever ``best`` names; directories without ``.metadata`` are cut-off
saves and go (saves are collective, so none is in flight when rank 0 prunes).

A crash save (the engine's last resort after an exception on rank 0) is not attempted under world > 1:
DCP needs every rank, and the others may be gone. The newest committed directory stands.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from engine.checkpoint import dcp
from engine.checkpoint import format as ckpt
from engine.checkpoint.manager import Checkpointer
from engine.run import events as ev


class ShardedCheckpointer(Checkpointer):
    """Saves DCP directories on every rank of ``group`` (engine.distributed.fsdp.Fsdp2)."""

    def __init__(self, directory, config, emit, group, before_commit=None) -> None:
        """``directory`` is the run's checkpoints/ on every rank (shared by all: DCP writes each rank's shard)."""
        super().__init__(directory, config, emit, before_commit)
        self.group = group
        self.live: tuple | None = None  # (model, optimizer), bound once built
        #: The step whose directory this process wrote (or restored) with the live weights; -1: none.
        self.fresh_at = -1

    def bind(self, model, optimizer) -> None:
        """The sharded model and its optimizer, whose state every save writes."""
        self.live = (model, optimizer)

    def save(self, which: str, step: int, state: tuple[dict, dict], kind: str | None = None,
             request_id: str | None = None) -> str | None:
        """Write (or reuse) ``step-N/`` and point ``which``'s link at it; its path, None if it failed (a collective)."""
        if self.directory is None or self.live is None:
            return None
        path = self.directory / f"step-{step:08d}"
        if kind == "crash" and self.group.world > 1:
            self.error = "not saved on a crash: a DCP save needs every rank"
            return None
        started = time.perf_counter()
        error = self._write(path, state, weights=self.fresh_at != step)
        if error is not None:
            self.error = error
            if self.group.owner:
                self.emit(ev.CheckpointFailed(step=step, path=str(path), error=error))
            return None
        self.fresh_at, self.last_checkpoint, self.last_checkpoint_step = step, str(path), step
        if which == "last":
            self.saved_last_at = step
        if self.group.owner:
            self._link("last", path)
            if which == "best":
                self._link("best", path)
            self._prune()
            self.emit(ev.CheckpointSaved(step=step, path=str(path), kind=kind or which,
                                         seconds=time.perf_counter() - started, bytes=dcp.size(path),
                                         request_id=request_id))
        return str(path)

    def _write(self, path: Path, state: tuple[dict, dict], weights: bool) -> str | None:
        """Sidecar (rank 0) then, when ``weights``, every rank's shards; the error text, None on success."""
        model, optimizer = self.live
        tensors, meta = state
        rng = {k: v for k, v in tensors.items() if k.startswith("rng.")}
        meta = {**meta, "dcp_optimizer": dcp.has_optimizer_state(optimizer)}
        error = None
        if self.group.owner:
            try:
                if weights and path.exists():  # cut off mid-save, or from before a rollback: not this state
                    self._unlink_links_to(path)
                    shutil.rmtree(path)
                path.mkdir(parents=True, exist_ok=True)
                ckpt.write(path / dcp.SIDECAR, rng, meta, before_commit=self.before_commit)
            except (OSError, ckpt.CheckpointWriteError) as exc:
                error = f"{path}: {getattr(exc, 'strerror', None) or exc}"
        if self.group.agree(error is not None):  # also the barrier before any rank writes a shard
            return error or f"{path}: rank 0 could not prepare the directory"
        if not weights:
            return None
        try:
            dcp.save_shards(path, model, optimizer)
        except dcp.errors() as exc:  # DCP raises every rank's failure on every rank (CheckpointException)
            error = f"{path}: {dcp.failure_text(exc)}"
        if self.group.agree(error is not None):
            return error or f"{path}: another rank's shard failed"
        return None

    def _link(self, name: str, target: Path) -> None:
        """Point ``name`` at ``target`` by renaming a fresh symlink over it (never a moment without one)."""
        link = self.directory / name
        tmp = self.directory / f".{name}.tmp-{os.getpid()}"
        try:
            if tmp.is_symlink():
                tmp.unlink()
            os.symlink(target.name, tmp)
            os.replace(tmp, link)
            ckpt.fsync_dir(self.directory)
        except OSError:
            pass  # the links are for people and tools; resume reads the committed directories themselves

    def _unlink_links_to(self, path: Path) -> None:
        for name in ("last", "best"):
            link = self.directory / name
            if link.is_symlink() and os.readlink(link) == path.name:
                link.unlink()

    def _prune(self) -> None:
        keep = max(2, self.config.keep_last)
        dirs = sorted(p for p in self.directory.glob("step-*") if p.is_dir() and not p.is_symlink())
        done = [p for p in dirs if dcp.complete(p)]
        linked = {os.readlink(link) for link in (self.directory / "last", self.directory / "best")
                  if link.is_symlink()}
        for old in [p for p in dirs if not dcp.complete(p)] + done[:-keep]:
            if old.name not in linked:
                shutil.rmtree(old, ignore_errors=True)  # a directory that will not go is disk used, not a broken run

    def _restored(self, loaded: ckpt.Loaded) -> None:
        super()._restored(loaded)
        if Path(loaded.path).is_dir():
            self.fresh_at = self.saved_last_at = int(loaded.meta["step"])  # it holds exactly the live state
