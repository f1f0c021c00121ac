"""The run's checkpoint manager: when to save, where, what to keep, and which file to resume or roll back to.

The file format (atomic safetensors, checksums, no pickle) is engine.checkpoint.format;
this component owns the policy around it:

- cadence: ``last`` every ``checkpoint.every_steps`` (and at every eval, the
  loop's call), ``step-N`` at the same cadence when ``keep_last`` > 0, of
  which only the newest ``keep_last`` stay; ``best`` on a new best eval.
- rotation: saving ``last`` moves the previous one to ``last.prev`` only when
  that previous one is known good (written by this process, or loaded and
  fully validated by it). A ``last`` that failed validation is replaced, never
  rotated over a good ``last.prev``; a crash right after a resume saves
  nothing (the file it resumed from already holds that step).
- restore: the candidates newest first by the step each records
  (engine.checkpoint.store); each must verify (checksums), pass the metadata
  check (types, ranges) and the caller's check against the live model and
  optimizer (shapes), or it is skipped with a note for the run's log. An
  intact file that is not this run's state (``CheckpointMismatch``:
  optimizer state that does not hash to its recorded digest, another frozen
  base, another run or task) refuses the resume instead. Intact files of
  another model shape (``CheckpointShape``: a flag given with the resume
  changed the model) are not called damaged: when none fits, the error
  says the shape differs.
- the optimizer digest: every file records the sha256 of its optimizer
  state (``optimizer_digest``: a resume proves it continues the same optimizer); a restore
  recomputes it from the optimizer as loaded and says it matched
  (``announce``), or refuses. One hash of the optimizer state per save and
  per resume (~1 s per GB of state).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from engine.checkpoint import format as ckpt
from engine.checkpoint import store
from engine.core.core_sections import CheckpointConfig
from engine.run import events as ev

#: ``apply(loaded)``: validate a checkpoint against the live run, then load it; CheckpointError if it does not fit.
Apply = Callable[[ckpt.Loaded], None]


class Checkpointer:
    """Saves, prunes and restores one run's checkpoints in ``directory`` (None: a run that keeps none)."""

    def __init__(self, directory: Path | None, config: CheckpointConfig, emit: Callable[[ev.Event], None],
                 before_commit: Callable[[Path], None] | None = None) -> None:
        """``before_commit``: a test hook every write calls before its commit (engine.training.faults)."""
        self.directory = Path(directory) if directory else None
        self.config = config
        self.emit = emit
        self.before_commit = before_commit
        #: The newest checkpoint on disk that holds this run's state (what a failed save leaves it with).
        self.last_checkpoint: str | None = None
        #: The step ``last_checkpoint`` holds (None before one is written or resumed from).
        self.last_checkpoint_step: int | None = None
        #: Step of the newest ``last`` (written, or resumed from); a save at that step again is skipped.
        self.saved_last_at = -1
        #: The last write error (said again when the final save fails).
        self.error = ""
        #: True when ``last`` on disk is known good, so a save may rotate it to ``last.prev``.
        self.last_trusted = False
        #: What the last restore verified of the optimizer digest (a line for the run's log).
        self.verified = ""

    def final_failed(self, reason: str) -> str:
        """``reason`` for a run whose final save failed: the end state is not on disk, so say where the newest
        good checkpoint is (the caller must not exit 0 for it)."""
        kept = self.last_checkpoint
        return (f"{reason}; final checkpoint FAILED ({self.error}); "
                + (f"newest good checkpoint {kept}" if kept else "no checkpoint on disk"))

    # -- cadence -----------------------------------------------------------------------
    def due(self, step: int) -> bool:
        """True when ``step`` should write ``last`` (and, with keep_last, a ``step-N``)."""
        every = self.config.every_steps
        return self.directory is not None and every > 0 and step > 0 and step % every == 0

    def keeps_steps(self) -> bool:
        """True when step-N checkpoints are kept beside ``last``."""
        return self.config.keep_last > 0

    # -- saving ------------------------------------------------------------------------
    def save(self, which: str, step: int, state: tuple[dict, dict], kind: str | None = None,
             request_id: str | None = None) -> str | None:
        """Write ``which`` ("last", "best", "step") with ``state`` = (tensors, meta); its path, None if it failed."""
        if self.directory is None:
            return None
        name = f"step-{step:08d}" if which == "step" else which
        path = self.directory / f"{name}.safetensors"
        tensors, meta = state
        digest = ckpt.optimizer_digest(tensors)
        meta = {**meta, "optimizer_digest": digest}
        rotate = which == "last" and self.last_trusted
        try:
            size, seconds = ckpt.timed_write(path, tensors, meta, rotate, self.before_commit)
        except ckpt.CheckpointWriteError as exc:
            self.error = str(exc)
            self.emit(ev.CheckpointFailed(step=step, path=str(path), error=str(exc)))
            return None
        if which == "step":
            self._prune()
        if which == "last":
            self.saved_last_at, self.last_trusted = step, True
        self.last_checkpoint, self.last_checkpoint_step = str(path), step
        self.emit(ev.CheckpointSaved(step=step, path=str(path), kind=kind or which, seconds=seconds, bytes=size,
                                     digest=digest, request_id=request_id))
        return str(path)

    def _prune(self) -> None:
        keep = self.config.keep_last
        files = sorted(self.directory.glob("step-*.safetensors"))
        for old in files[:-keep] if keep else files:
            try:
                old.unlink()
            except OSError:
                pass  # a step file that will not go is disk used, not a broken run

    # -- restoring ---------------------------------------------------------------------
    def restore(self, first: ckpt.Loaded, apply: Apply) -> ckpt.Loaded:
        """Load ``first`` through ``apply``, else the newest older candidate that fits; CheckpointError if none.

        The returned checkpoint's ``skipped`` lists every file passed over and why.
        """
        skipped, shaped = list(first.skipped), []
        loaded: ckpt.Loaded | None = first
        while loaded is not None:
            try:
                apply(loaded)
            except ckpt.CheckpointMismatch:
                raise
            except ckpt.CheckpointError as exc:
                (shaped if isinstance(exc, ckpt.CheckpointShape) else skipped).append(str(exc))
                loaded = self._older_than(loaded.path, skipped)
                continue
            loaded.skipped = skipped + shaped
            self._restored(loaded)
            return loaded
        raise ckpt.CheckpointError(none_usable(self.directory or first.path.parent, skipped, shaped))

    def rollback(self, apply: Apply, group=None) -> ckpt.Loaded | None:
        """Load the newest good checkpoint (a NaN rollback); None when there is none.

        Across ranks (``group``: the distributed strategy, world > 1) rank 0 alone picks and verifies the
        candidate, since it alone has the directory's files, and broadcasts it: under DDP the whole
        checkpoint (a pickle over the group; rare, and the price of every replica loading the very same
        state), under FSDP2 the sidecar (each rank then reads its shards from the directory in DCP's
        collective load). Every rank applies that one candidate; one that fails on any rank is passed
        over on all, and the next is tried, so the ranks never hold different states or stop apart.
        """
        if group is None or group.world == 1:
            if self.directory is None:
                return None
            try:
                return self.restore(store.load_latest(self.directory), apply)
            except ckpt.CheckpointError:
                return None
        after = None
        while True:
            pick = self._newest(after) if group.owner else None
            pick = group.broadcast(pick)
            if pick is None:
                return None
            try:
                apply(pick)
                failed = False
            except ckpt.CheckpointError:
                failed = True
            if not group.agree(failed):
                self._restored(pick)
                return pick
            after = pick.path

    def _newest(self, after: Path | None) -> ckpt.Loaded | None:
        """The newest verified checkpoint (older than ``after`` when given); None when there is none."""
        if self.directory is None:
            return None
        try:
            return store.load_latest(self.directory, after=after)
        except ckpt.CheckpointError:
            return None

    def bind(self, model, optimizer) -> None:
        """The live model and optimizer (a file's state comes with each save; FSDP2's manager reads them)."""

    def announce(self, loaded: ckpt.Loaded | None, step: int) -> None:
        """Tell the run's log what a resume from ``loaded`` passed over (a warning per skipped file) and what it
        verified (the optimizer digest); nothing for a fresh run."""
        if loaded is None:
            return
        for note in loaded.skipped:  # a CheckpointShape's note says itself that the file is intact
            what = "checkpoint" if "another model shape" in note else "damaged checkpoint"
            self.emit(ev.Warning(text=f"skipped {what}: {note}", step=step))
        if loaded.skipped:
            self.emit(ev.LogLine(text=f"resume: took {loaded.path.name} (step {loaded.meta.get('step')}), the newest "
                                      "checkpoint that verifies", stream="engine"))
        if self.verified:
            self.emit(ev.LogLine(text=f"resume: {self.verified}", stream="engine"))

    def weights(self, loaded: ckpt.Loaded, kept, optim) -> Callable[[], None]:
        """Check ``loaded``'s model and optimizer state against the live ones now (CheckpointError naming the
        first misfit, CheckpointMismatch for another frozen base) and return what loads them, then checks the
        optimizer digest. ``kept`` is the model's engine.checkpoint.weights.Weights. A DCP directory is checked by DCP
        as it loads, resharded."""
        if Path(loaded.path).is_dir():
            from engine.checkpoint import dcp

            return lambda: dcp.load(loaded, kept.model, optim.optimizer)
        state = kept.check(loaded)
        try:
            optim.check(loaded.tensors, loaded.meta)
        except ValueError as exc:
            raise ckpt.CheckpointError(f"{loaded.path}: checkpoint metadata is incomplete or invalid ({exc})") \
                from None

        def load() -> None:
            kept.load(state)
            ckpt.restore_optimizer(optim.optimizer, loaded.tensors, loaded.meta["optimizer"])
            self.verified = ckpt.verify_optimizer(optim.optimizer, loaded)  # CheckpointMismatch: not what was saved
        return load

    def _older_than(self, path: Path, skipped: list[str]) -> ckpt.Loaded | None:
        """The next candidate after ``path`` that verifies (its damaged predecessors added to ``skipped``)."""
        directory = self.directory or Path(path).parent
        try:
            older = store.load_latest(directory, after=path)
        except ckpt.CheckpointError:
            return None
        skipped.extend(older.skipped)
        return older

    def _restored(self, loaded: ckpt.Loaded) -> None:
        self.last_checkpoint, self.last_checkpoint_step = str(loaded.path), int(loaded.meta["step"])
        if loaded.path.name == "last.safetensors":
            self.last_trusted = True
            self.saved_last_at = int(loaded.meta["step"])


def none_usable(where: Path, damaged: list[str], shaped: list[str]) -> str:
    """The error when no candidate fits: damaged files as damage, intact files of another shape as a shape that
    differs (a flag given with --resume builds another model than the run trained; nothing on disk is wrong)."""
    if shaped and not damaged:
        return (f"{shaped[0]}; the model this config builds differs from the checkpoint's ({len(shaped)} intact "
                "checkpoint(s), none of this shape): resume without the flags that change the model")
    if shaped:
        return (f"{where}: no usable checkpoint ({len(damaged)} damaged: {damaged[0]}; {len(shaped)} intact of "
                f"another model shape: {shaped[0]})")
    return f"{where}: no usable checkpoint ({len(damaged)} damaged: {damaged[0]})"
