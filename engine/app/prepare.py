"""Everything checked before a run touches disk: the config, the run directory, the checkpoint to resume.

Errors a user can fix (config, data, resume directory) raise ``UsageError``
with the one line to print (``sensorlm-tui: error: <place>: <what>``, exit 2);
nothing on disk is touched before the config has validated.

The run directory is judged here too, before anything is created
(engine.run.trust): whose it is, where it is, and, for a fresh run, what it
already holds. A fresh run gets its run id (``RunConfig.run_id``); a resume
takes only a checkpoint of its own run and task.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from engine.core import config as cfg
from engine.core.cli_args import explain_flag_error, overrides_from
from engine.core.fmt import printable
from engine.run.rundir import RunDir, RunDirError, default_name, new_run_id
from engine.run.trust import NotFresh

#: Longest file name (bytes) Linux file systems take; a run name becomes a directory name.
NAME_MAX = 255


class UsageError(Exception):
    """Bad input from the user or a file; the message is the one line to print."""


@dataclass
class Prepared:
    """A validated config, its run directory and (when resuming) the checkpoint to load."""

    config: cfg.RunConfig
    run_dir: RunDir
    resume: object | None  # engine.checkpoint.format.Loaded; typed loosely to keep this module torch-free at import
    #: A line for the run's log before training starts (e.g. a resume that had to start over).
    note: str | None = None
    #: A fresh run: refused if the directory already holds one (checked again once it owns the directory).
    fresh: bool = False
    #: Lines for the run's log about the input: an old config key read under its new name.
    notes: tuple[str, ...] = ()


def prepare(args: argparse.Namespace) -> Prepared:
    """Validate everything before touching disk; UsageError with a one-line message otherwise."""
    notes: list[str] = []
    try:
        overrides = overrides_from(args)
        _refuse_run_id(overrides)
        if args.resume:
            prepared = _prepare_resume(args, cfg.upgrade(overrides, "--set", notes))
            prepared.notes = tuple(notes)
            return prepared
        config = cfg.load(args.config, preset=args.preset, overrides=overrides, task=args.task, notes=notes)
    except cfg.ConfigError as exc:
        raise UsageError(str(explain_flag_error(exc))) from None
    name = config.name or (Path(args.run_dir).name if args.run_dir else default_name())
    check_name(name, "name" if config.name or not args.run_dir else "--run-dir's name")
    config = config.model_copy(update={"name": name, "run_id": new_run_id()})
    root = Path(args.run_dir) if args.run_dir else Path("runs") / name
    _utf8_path("--run-dir", root)
    try:
        refuse_existing(RunDir(root))
    except OSError as exc:  # a component over 255 bytes, a parent we may not search, a file where a dir goes
        raise UsageError(f"--run-dir {clip(root)}: cannot use this path ({exc.strerror})") from None
    _check_task(config)
    return Prepared(config, RunDir(root), None, fresh=True, notes=tuple(notes))


def check_name(name: str, place: str = "name") -> None:
    """UsageError (one line, the name shown escaped) unless ``name`` can be a run's name: it becomes a directory
    (runs/<name>), a field of every event and a word on every viewer's screen, so it is UTF-8 text of at most
    ``NAME_MAX`` bytes, with no '/', no control characters and not '.' or '..'."""
    shown = f"'{printable(name[:80])}'"
    if "/" in name or "\0" in name or name in (".", ".."):  # it becomes runs/<name>: no escaping that
        raise UsageError(f"{place}={shown}: a run name cannot contain '/' or be '.' or '..'")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:  # bytes that were not UTF-8 (os.fsdecode keeps them as lone surrogates)
        raise UsageError(f"{place}={shown}: not valid UTF-8; a run name is UTF-8 text (choose one with "
                         "--name)") from None
    if printable(name) != name:
        raise UsageError(f"{place}={shown}: a run name cannot contain control characters (shown escaped); "
                         "choose one with --name")
    if size > NAME_MAX:  # it names a directory: the file system would refuse it later
        raise UsageError(f"{place}='{printable(name[:40])}'…: {size} bytes; a run name is at most {NAME_MAX} bytes")


def _utf8_path(flag: str, path: Path) -> None:
    """UsageError unless ``path`` is UTF-8 text (it is written into the run's events and status)."""
    try:
        os.fspath(path).encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{flag} {clip(path)}: the path is not valid UTF-8; a run directory's path is UTF-8 "
                         "text") from None


def _refuse_run_id(overrides: dict) -> None:
    if "run_id" in overrides:
        raise UsageError("--set run_id: a run's id is made by the engine when the run is created; it cannot be set")


def clip(path: Path | str, limit: int = 120) -> str:
    """A path short enough for a one-line error, control characters shown escaped."""
    text = printable(path)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def refuse_existing(run_dir: RunDir) -> None:
    """UsageError unless a fresh run may start in ``run_dir`` (engine.run.trust.check_fresh: a directory that is
    this user's alone, empty or holding only an interrupted start-up's leftovers). "use --resume" is advised
    only where it would work: the directory holds a run whose config.toml loads."""
    try:
        run_dir.check_fresh()
    except NotFresh as exc:
        if "config.toml" not in exc.run_files:
            raise UsageError(f"--run-dir {exc}") from None
        why = _unresumable(run_dir)
        if why:
            raise UsageError(f"--run-dir {exc}; --resume cannot continue it either ({why})") from None
        raise UsageError(f"--run-dir {clip(run_dir.root)}: already holds a run ({', '.join(exc.run_files)}); use "
                         f"--resume {clip(run_dir.root)} to continue it, or another directory") from None
    except RunDirError as exc:
        raise UsageError(f"--run-dir {exc}") from None


def _unresumable(run_dir: RunDir) -> str | None:
    """Why ``--resume`` would refuse this directory's config.toml, or None when it loads."""
    try:
        cfg.load_resolved(run_dir.config)
    except cfg.ConfigError as exc:
        return clip(str(exc), 200)
    return None


def _check_task(config: cfg.RunConfig) -> None:
    from engine.core.registry import task_names  # names only: importing a task would import torch

    if config.task.name not in task_names():
        raise UsageError(f"task.name={config.task.name!r}: unknown task; allowed: {', '.join(task_names())}") \
            from None


def _prepare_resume(args: argparse.Namespace, overrides: dict) -> Prepared:
    root = Path(args.resume)
    # Refused rather than honoured: a resume continues the run from its own config and directory; another
    # TOML file would silently fight the checkpoint's config, and another --run-dir would mean copying the
    # run. Flags and --set still change fields (e.g. --max-steps to extend it). --run-dir naming the same
    # directory is fine (the dashboard's launcher always passes it).
    if args.config:
        raise UsageError(f"--config {args.config}: not allowed with --resume (the run's own config.toml and "
                         f"checkpoint decide); change fields with flags or --set")
    try:
        return _prepare_resume_in(root, args, overrides)
    except OSError as exc:  # a parent we may not search, a name too long: is_dir()/is_file() raise these
        raise UsageError(f"--resume {clip(root)}: cannot read the run directory ({exc.strerror})") from None


def _prepare_resume_in(root: Path, args: argparse.Namespace, overrides: dict) -> Prepared:
    run_dir = _resume_dir(root, args)
    try:
        config = cfg.load_resolved(run_dir.config)  # validates the file even when the checkpoint's copy wins
    except cfg.ConfigError as exc:
        raise UsageError(str(exc)) from None
    _refuse_other_task(config, overrides, root)
    from engine.checkpoint import format as ckpt
    from engine.checkpoint import store

    if run_dir.checkpoints.is_dir() and not store.candidates(run_dir.checkpoints):
        # Stopped before its first checkpoint (the step-0 one, right after the first eval): nothing was
        # trained that could be lost, so start it again from its own config rather than refuse. A
        # directory whose checkpoints are all damaged still refuses (below): those may be recoverable.
        config = _with_flags(config, overrides)
        _check_task(config)
        return Prepared(config, run_dir, None, note="resume: the run stopped before its first checkpoint; "
                                                    f"starting it over from step 0 with {run_dir.config}")
    try:
        loaded = store.load_latest(run_dir.checkpoints, check=lambda loaded: _usable(loaded, config))
    except ckpt.CheckpointError as exc:
        raise UsageError(f"--resume {clip(root)}: {exc}") from None
    # The checkpoint's live settings (batch size, backend changed during the run) win over config.toml;
    # flags given with --resume (e.g. --max-steps to extend a run) win over both.
    base = _with_live_batch(loaded.meta.get("config") or config.model_dump(), loaded.meta)
    try:
        config = cfg.validate(base, f"{loaded.path}")
    except cfg.ConfigError as exc:
        raise UsageError(str(explain_flag_error(exc))) from None
    config = _with_flags(config, overrides)
    sharded = Path(loaded.path).is_dir()  # an FSDP2 run's DCP directory, else one file (DDP, one process)
    if sharded != (config.runtime.strategy == "fsdp2"):
        was = "fsdp2" if sharded else "ddp"
        raise UsageError(f"--strategy {config.runtime.strategy} (runtime.strategy): {root} was trained with {was} "
                         f"(its checkpoints are {'DCP directories' if sharded else 'single files'}) and keeps it; "
                         f"resume it with --strategy {was}")
    return Prepared(config, run_dir, loaded)


def _resume_dir(root: Path, args: argparse.Namespace) -> RunDir:
    """The run directory ``--resume`` names, once it is known to be a run this user may continue here."""
    _utf8_path("--resume", root)
    if not root.is_dir():
        raise UsageError(f"--resume {clip(root)}: no such run directory")
    if args.run_dir and not _same_dir(args.run_dir, root):
        raise UsageError(f"--run-dir {clip(args.run_dir)}: not allowed with --resume {clip(root)} (a run "
                         "resumes in its own directory); copy the directory first to continue it elsewhere")
    run_dir = RunDir(root)
    try:
        run_dir.check_trusted()  # another user's directory, or one others may write: nothing in it is ours
        run_dir.check_own_entries()  # a link where our file goes (engine.lock, events.jsonl, control.sock…)
    except RunDirError as exc:
        raise UsageError(f"--resume {exc}") from None
    if not run_dir.config.is_file():
        raise UsageError(f"--resume {clip(root)}: not a run directory (no config.toml)")
    from engine.run.control.wire import serving

    if serving(run_dir):  # a live engine owns this directory: appending to its log would corrupt the run
        from engine.core.invocation import command

        raise UsageError(f"--resume {clip(root)}: an engine is still running this run; watch it with "
                         f"`{command('attach', root)}`")
    from engine.app.integrations.ownership import integration_of

    own = integration_of(run_dir)
    if own is not None:  # its config.toml is the user's script's, not an engine config: say whose it is
        framework, own_command = printable(own.get("framework"))[:40], printable(own.get("command"))[:300]
        raise UsageError(f"--resume {clip(root)}: a run of your own training script ({framework}), which only that "
                         f"script can resume: run it again ({own_command})")
    return run_dir


def _usable(loaded, config: cfg.RunConfig) -> None:
    """A resume candidate's check: its metadata and config (a bad one is skipped for an older one), and that it is
    this run's and this task's (one that is not refuses the resume: engine.checkpoint.format.check_provenance)."""
    from engine.checkpoint import format as ckpt

    ckpt.validate_meta(loaded)
    try:
        if loaded.meta.get("config") is not None:
            cfg.validate(loaded.meta["config"], f"{loaded.path}")
    except cfg.ConfigError as exc:
        raise ckpt.CheckpointError(f"{loaded.path}: checkpoint metadata is incomplete or invalid "
                                   f"(config: {str(exc)[:160]})") from None
    ckpt.check_provenance(loaded, config.run_id, config.task.name)


def _refuse_other_task(config: cfg.RunConfig, overrides: dict, root: Path) -> None:
    """UsageError for ``--task`` naming another task than the run's: a resume continues its own task (merging the
    flag into the run's config read as a stray ``--set <task>`` the user never wrote)."""
    task = overrides.get("task")
    wanted = task.get("name") if isinstance(task, dict) else None
    if wanted is not None and wanted != config.task.name:
        raise UsageError(f"--task {printable(wanted)}: {clip(root)} trains task {config.task.name!r} (its "
                         f"config.toml); a resume continues its own task: start a {printable(wanted)} run in "
                         "another directory")


def _same_dir(a: str, b: Path) -> bool:
    """True when two paths name the same directory (compared resolved: ./runs/x and runs/x/ are the same)."""
    try:
        return Path(a).resolve() == b.resolve()
    except (OSError, RuntimeError):
        return False


def _with_live_batch(config: dict, meta: dict) -> dict:
    """The checkpoint's config with the batch that was really running (OOM recovery changes grad_accum
    without touching the saved config), so flags and the memory guard start from the truth."""
    train = dict(config.get("train") or {})
    for key in ("batch_size", "grad_accum"):
        if isinstance(meta.get(key), int) and not isinstance(meta.get(key), bool):
            train[key] = meta[key]
    return {**config, "train": train}


def settle_resumed_batch(loaded, config: cfg.RunConfig) -> None:
    """Make the checkpoint restore the batch the config settled on (live value < flags < the guard's cap).

    The trainer restores batch_size/grad_accum from the checkpoint's metadata; without this a resume
    capped by --vram-gb said "batch_size 64 → 14" and then ran 64.
    """
    loaded.meta["batch_size"] = config.train.batch_size
    loaded.meta["grad_accum"] = config.train.grad_accum


def _with_flags(config: cfg.RunConfig, overrides: dict) -> cfg.RunConfig:
    """``config`` with the flags given beside --resume applied (UsageError naming the flag when one is bad)."""
    if not overrides:
        return config
    try:
        return cfg.validate(cfg.deep_merge(config.model_dump(), overrides), "flags")
    except cfg.ConfigError as exc:
        raise UsageError(str(explain_flag_error(exc))) from None
