"""`sensorlm-tui export RUN`: a task's export (PEFT adapter, pretrained directory, …) from any checkpoint.

The checkpoint is the whole recipe: its metadata holds the resolved config
and the task's state, its tensors the model (a LoRA run's: the adapters, and
the frozen base's identity, engine.checkpoint.weights). So the command rebuilds the task
and the model from them, checks the base is the one trained on, loads the
weights strictly, and asks the task's ``export``
hook to write ``kind`` (default: the task's own choice, e.g. an adapter for
a LoRA run) into ``RUN/exports/step-N`` (``<kind>-step-N`` with ``--kind``) or ``--out``. The task writes
atomically; a failure leaves nothing under the final name. Works on a live
run too: checkpoints are only ever replaced by rename, so the file read is
complete. An FSDP2 run's checkpoint is a DCP directory: its shards are gathered into full tensors in
this one process, with no process group (engine.checkpoint.dcp.load_full). Torch and the task are
imported only here, never by ``--help``.

Bad input (no such run, no usable checkpoint, a task with nothing to
export, an unknown kind) is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.core.exit_codes import ExitCode


class ExportError(Exception):
    """Bad input to `export`; ``str()`` is the one-line message."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `export` flags."""
    parser.add_argument("run", help="run directory (or a name under ./runs)")
    parser.add_argument("--checkpoint", default=None, metavar="PATH",
                        help="checkpoint file, or an fsdp2 run's step-N directory, to export from (default: the "
                        "run's newest good one)")
    parser.add_argument("--kind", default=None, help="what to write, e.g. peft_adapter or pretrained "
                        "(default: the task's choice for the run)")
    parser.add_argument("--out", default=None, metavar="DIR", help="output directory (default RUN/exports/step-N)")


def _run_dir(text: str) -> Path:
    path = Path(text)
    if not path.is_dir() and (Path("runs") / text).is_dir():
        path = Path("runs") / text
    if not path.is_dir():
        raise ExportError(f"export: {text}: no such run directory")
    return path


def export_run(run: str | Path, checkpoint: str | Path | None = None, kind: str | None = None,
               out: str | Path | None = None) -> Path:
    """Export ``kind`` from ``checkpoint`` (default: the newest good one) of ``run``; returns the written path."""
    from engine.checkpoint import format as ckpt
    from engine.checkpoint import store
    from engine.core.config import ConfigError, validate
    from engine.core.registry import get_spec, make_task
    from engine.tasks.protocol import TaskError

    run_dir = _run_dir(str(run))
    try:
        loaded = store.read(Path(checkpoint)) if checkpoint else store.load_latest(run_dir / "checkpoints")
    except ckpt.CheckpointError as exc:
        raise ExportError(f"export: {exc}") from None
    meta = loaded.meta
    step = meta.get("step", 0)
    target = Path(out) if out else run_dir / "exports" / (f"{kind}-step-{step}" if kind else f"step-{step}")
    _check_target(target, "--out " if out else "")
    try:
        config = validate(meta["config"], f"{loaded.path} (config)")
    except (KeyError, TypeError) as exc:
        raise ExportError(f"export: {loaded.path}: checkpoint holds no run config ({exc})") from None
    except ConfigError as exc:
        raise ExportError(f"export: {exc}") from None
    try:
        task = make_task(config)
        if not hasattr(task, "export"):
            raise TaskError(f"task {config.task.name!r} has nothing to export besides checkpoints")
        task.setup(meta.get("task_state"))
        model = task.build_model()
        if Path(loaded.path).is_dir():  # an FSDP2 run's DCP directory: every rank's shard gathered, no group
            from engine.checkpoint import dcp

            try:
                dcp.load_full(loaded.path, model)
            except ckpt.CheckpointError as exc:
                raise TaskError(str(exc)) from None
        else:
            _load_file_weights(loaded, model, task.model_source())
        exports = get_spec(config.task.name).capabilities.exports
        if kind is not None and kind not in exports:
            raise TaskError(f"--kind {kind!r}; task {config.task.name!r} exports: {', '.join(exports) or 'nothing'}")
        written = task.export(model, target, kind)
    except TaskError as exc:
        raise ExportError(f"export: {exc}") from None
    if written is None:
        raise ExportError(f"export: task {config.task.name!r} has nothing to export besides checkpoints")
    return Path(written)


def _check_target(target: Path, flag: str) -> None:
    """ExportError unless ``target`` can become a directory: every existing part of its path a directory.

    Checked before the model is built (seconds) and before anything is written, so an ``exports`` that is
    a file, or an ``--out`` under one, is one line naming it instead of ``FileExistsError`` at the end.
    """
    for part in [target, *target.parents]:
        if part.is_dir():
            return
        if part.exists() or part.is_symlink():
            raise ExportError(f"export: {flag}{target}: {part} exists and is not a directory (nothing was written)")


def _load_file_weights(loaded, model, source: str | None) -> None:
    """A single-file checkpoint's ``model.*`` tensors into ``model``, strictly: all of them, or (a LoRA run's) all
    that train onto the rebuilt base, whose identity must match ``source`` and the file's (engine.checkpoint.weights).
    TaskError when they do not fit."""
    from engine.checkpoint import format as ckpt
    from engine.checkpoint.weights import Weights
    from engine.tasks.protocol import TaskError

    weights = Weights(model, source)
    try:
        weights.load(weights.check(loaded))
    except ckpt.CheckpointError as exc:
        raise TaskError(f"{str(exc).splitlines()[0]} (the model its config builds)") from None


def main(args: argparse.Namespace) -> int:
    """CLI entry: print the written path, or one line and exit 2."""
    try:
        path = export_run(args.run, args.checkpoint, args.kind, args.out)
    except ExportError as exc:
        sys.stderr.write(f"sensorlm-tui: error: {exc}\n")
        return ExitCode.BAD_INPUT
    print(path)
    return 0
