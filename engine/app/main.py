"""The engine process: resolve the config, open the run directory, serve controls, train.

``sensorlm-tui train --headless`` and ``python -m engine`` both end up in
``main``. It never needs a terminal: the dashboard launches this same entry
point detached, with its output in the run's engine.log.

Errors a user can fix (config, data, resume directory, budget guard) print one
line ``sensorlm-tui: error: <place>: <what>`` and exit 2; nothing on disk is
touched before the config has validated.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

from engine.core import config as cfg
from engine.core.cli_args import OneLineParser, add_train_arguments, explain_flag_error, overrides_from
from engine.core.exit_codes import ExitCode
from engine.run.rundir import RunDir, RunDirError, default_name, resume_command

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


def build_parser(prog: str = "sensorlm-tui train") -> argparse.ArgumentParser:
    """The engine's argument parser (the same flags as `sensorlm-tui train`)."""
    parser = OneLineParser(prog=prog, description="Run the training engine headless (plain log lines).")
    add_train_arguments(parser)
    return parser


def prepare(args: argparse.Namespace) -> Prepared:
    """Validate everything before touching disk; UsageError with a one-line message otherwise."""
    try:
        overrides = overrides_from(args)
        if args.resume:
            return _prepare_resume(args, overrides)
        config = cfg.load(args.config, preset=args.preset, overrides=overrides, task=args.task)
    except cfg.ConfigError as exc:
        raise UsageError(str(explain_flag_error(exc))) from None
    name = config.name or (Path(args.run_dir).name if args.run_dir else default_name())
    if "/" in name or "\0" in name or name in (".", ".."):  # it becomes runs/<name>: no escaping that
        raise UsageError(f"name={name[:80]!r}: a run name cannot contain '/' or be '.' or '..'")
    if len(os.fsencode(name)) > NAME_MAX:  # it names a directory: the file system would refuse it later
        raise UsageError(f"name={name[:40]!r}…: {len(os.fsencode(name))} bytes; a run name is at most "
                         f"{NAME_MAX} bytes")
    config = config.model_copy(update={"name": name})
    root = Path(args.run_dir) if args.run_dir else Path("runs") / name
    try:
        _refuse_existing(RunDir(root))
    except OSError as exc:  # a component over 255 bytes, a parent we may not search, a file where a dir goes
        raise UsageError(f"--run-dir {_clip(root)}: cannot use this path ({exc.strerror})") from None
    _check_task(config)
    return Prepared(config, RunDir(root), None, fresh=True)


def _clip(path: Path | str, limit: int = 120) -> str:
    """A path short enough for a one-line error."""
    text = str(path)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _refuse_existing(run_dir: RunDir) -> None:
    """UsageError when a fresh run would write into a directory that holds one (its events, config, checkpoints)."""
    what = run_dir.holds_run()
    if what:
        raise UsageError(f"--run-dir {_clip(run_dir.root)}: already holds a run ({what}); use --resume "
                         "with it, or another directory")


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
        raise UsageError(f"--resume {_clip(root)}: cannot read the run directory ({exc.strerror})") from None


def _prepare_resume_in(root: Path, args: argparse.Namespace, overrides: dict) -> Prepared:
    if not root.is_dir():
        raise UsageError(f"--resume {root}: no such run directory")
    if args.run_dir and not _same_dir(args.run_dir, root):
        raise UsageError(f"--run-dir {_clip(args.run_dir)}: not allowed with --resume {_clip(root)} (a run "
                         "resumes in its own directory); copy the directory first to continue it elsewhere")
    run_dir = RunDir(root)
    if not run_dir.config.is_file():
        raise UsageError(f"--resume {root}: not a run directory (no config.toml)")
    from engine.run.control.channel import serving

    if serving(run_dir):  # a live engine owns this directory: appending to its log would corrupt the run
        raise UsageError(f"--resume {root}: an engine is still running this run; watch it with "
                         f"`sensorlm-tui attach {root}`")
    try:
        config = cfg.load_resolved(run_dir.config)  # validates the file even when the checkpoint's copy wins
    except cfg.ConfigError as exc:
        raise UsageError(str(exc)) from None
    from engine.checkpoint import format as ckpt

    if run_dir.checkpoints.is_dir() and not ckpt.candidates(run_dir.checkpoints):
        # Stopped before its first checkpoint (the step-0 one, right after the first eval): nothing was
        # trained that could be lost, so start it again from its own config rather than refuse. A
        # directory whose checkpoints are all damaged still refuses (below): those may be recoverable.
        config = _with_flags(config, overrides)
        _check_task(config)
        return Prepared(config, run_dir, None, note="resume: the run stopped before its first checkpoint; "
                                                    f"starting it over from step 0 with {run_dir.config}")
    def usable(loaded) -> None:  # metadata and its config checked: a bad one is skipped for an older one
        ckpt.validate_meta(loaded)
        try:
            if loaded.meta.get("config") is not None:
                cfg.validate(loaded.meta["config"], f"{loaded.path}")
        except cfg.ConfigError as exc:
            raise ckpt.CheckpointError(f"{loaded.path}: checkpoint metadata is incomplete or invalid "
                                       f"(config: {str(exc)[:160]})") from None

    try:
        loaded = ckpt.load_latest(run_dir.checkpoints, check=usable)
    except ckpt.CheckpointError as exc:
        raise UsageError(f"--resume {root}: {exc}") from None
    # The checkpoint's live settings (batch size, backend changed during the run) win over config.toml;
    # flags given with --resume (e.g. --max-steps to extend a run) win over both.
    base = _with_live_batch(loaded.meta.get("config") or config.model_dump(), loaded.meta)
    try:
        config = cfg.validate(base, f"{loaded.path}")
    except cfg.ConfigError as exc:
        raise UsageError(str(explain_flag_error(exc))) from None
    config = _with_flags(config, overrides)
    sharded = Path(loaded.path).is_dir()  # an FSDP2 run's DCP directory, else one file (DDP, one process)
    if sharded != (config.train.strategy == "fsdp2"):
        was = "fsdp2" if sharded else "ddp"
        raise UsageError(f"--strategy {config.train.strategy} (train.strategy): {root} was trained with {was} "
                         f"(its checkpoints are {'DCP directories' if sharded else 'single files'}) and keeps it; "
                         f"resume it with --strategy {was}")
    return Prepared(config, run_dir, loaded)


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


def _run_resumed_with(loaded, config: cfg.RunConfig) -> None:
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
        return cfg.validate(cfg._deep_merge(config.model_dump(), overrides), "flags")
    except cfg.ConfigError as exc:
        raise UsageError(str(explain_flag_error(exc))) from None


def run_prepared(prepared: Prepared, parallel=None, **options) -> int:
    """``_run_prepared`` (below); an fsdp2 run outside torchrun gets a process group of one for its
    strategy (engine.distributed.fsdp), left whatever happens (a group left open aborts the exit)."""
    if parallel is not None or prepared.config.train.strategy != "fsdp2":
        return _run_prepared(prepared, parallel=parallel, **options)
    from engine.optim import device as dev
    from engine.distributed.fsdp import Fsdp2

    try:
        device = dev.resolve(prepared.config.train.device).type
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    parallel = Fsdp2(device, prepared.config.train.precision)
    try:
        return _run_prepared(prepared, parallel=parallel, **options)
    finally:
        parallel.close()


def _run_prepared(prepared: Prepared, console: bool = True, install_signals: bool = True,
                  serve_controls: bool = True, controls=None, extra_sinks=(), ui_shares_machine: bool = False,
                  parallel=None) -> int:
    """Create/open the run directory and train; returns the exit code.

    The in-process dashboard passes its own ``controls`` and an in-memory sink in ``extra_sinks``
    and runs this in a worker thread (so no signal handlers, no console). Under torchrun this is rank 0's
    path, with ``parallel`` the strategy (engine.distributed.parallel): the other ranks get its config.

    Start-up phases (PhaseStarted) are stamped as they begin and emitted once the event log exists: a viewer
    then shows what the first seconds went into, and the last phase ticks until the first step.
    """
    from engine.run import events as ev

    phases = [ev.PhaseStarted(phase="importing torch")]
    from engine.run.control.requests import Controls
    from engine.training.loop import Trainer
    from engine.run.rundir import StatusWriter
    from engine.run.runlock import RunLock
    from engine.run.sinks import ConsoleSink, EventBus, JsonlSink

    from engine.checkpoint.format import CheckpointError
    from engine.distributed.parallel import CollectiveTimeout
    from engine.tasks.base import TaskError

    config, run_dir = prepared.config, prepared.run_dir
    phases.append(ev.PhaseStarted(phase="predicting memory"))
    many = parallel is not None and parallel.world > 1
    try:  # the guard's trace builds the task first, so a task's bad input (a damaged data file) can surface here
        # engine.budget: refuse a run predicted not to fit (per rank under torchrun), or cap its batch
        config, guard_note = _guard(config, parallel)
    except (TaskError, UsageError) as exc:
        if many:  # the other ranks wait for the config: tell them there is none, so they exit quietly
            parallel.broadcast({"refused": True})
        raise UsageError(str(exc) if isinstance(exc, UsageError) else str(exc).splitlines()[0]) from None
    if many:
        parallel.broadcast(config.model_dump(mode="json"))  # the others train what the guard let through
    if prepared.resume is not None:
        _run_resumed_with(prepared.resume, config)
    controls = controls or Controls()
    bus = EventBus()
    # on_step reads `status` when steps run, after the run directory and its status record exist (below).
    trainer = Trainer(config, bus, controls, checkpoint_dir=run_dir.checkpoints, resume=prepared.resume,
                      name=run_dir.name, run_dir=run_dir.root, on_step=lambda step: status.update(step=step),
                      parallel=parallel)
    if parallel is not None and hasattr(controls, "bind"):
        controls.bind(lambda: trainer.step, bus.emit)  # engine.distributed.controls: telemetry where controls land
    phases.append(ev.PhaseStarted(phase="building data and model", detail=f"{config.task.name}/{config.task.preset}"))
    try:  # build data, model and optimizer before anything is written: bad input leaves no litter
        trainer.setup()
    except (TaskError, CheckpointError, ValueError) as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    lock = None
    try:
        lock = RunLock.acquire(run_dir)  # the first file written there; a second engine stops here
        if prepared.fresh:
            _refuse_existing(run_dir)  # again, now that no other engine can be creating it
        run_dir.create()
        if prepared.resume is None:
            (run_dir.config).write_text(cfg.dump_toml(config))
        jsonl = JsonlSink(run_dir.events, warn=lambda text: bus.emit(ev.Warning(text=text)))
    except (RunDirError, UsageError, OSError) as exc:
        if lock is not None:
            lock.release()
        if isinstance(exc, (RunDirError, UsageError)):
            raise UsageError(str(exc)) from None
        raise UsageError(f"{run_dir.root}: cannot write run directory ({exc.strerror})") from None

    status = StatusWriter(run_dir, on_beat=jsonl.flush)
    sinks = [jsonl, _status_sink(status), *extra_sinks]
    if console:
        sinks.append(ConsoleSink(sys.stdout, print_every=config.train.print_every))
    for sink in sinks:
        bus.add(sink)
    for phase in phases:
        bus.emit(phase)
    for note in (prepared.note, guard_note):
        if note:
            bus.emit(ev.Warning(text=note))
    status.update(resume_command=resume_command(run_dir))
    status.start()
    server = None
    if serve_controls:
        server = _start_server(run_dir, controls, bus)
    if install_signals:
        from engine.app import signals

        signals.install(controls, config.train.on_hangup, run_dir.log,
                        note=lambda text: bus.emit(ev.Warning(text=text)))
    # The data plan (engine.training.threads) leaves a core to viewers on this machine.
    trainer.prefetch.viewers = lambda: int(ui_shares_machine) + (server.viewers() if server is not None else 0)
    from engine.training.system import SystemSampler

    system = SystemSampler(bus.emit).start()  # CPU/RAM/GPU load for viewers, every 2 s off the training thread
    exit_code = ExitCode.POLICY
    final_state = "failed"
    first = "restoring state, first step" if prepared.resume is not None else "first evaluation, first step"
    bus.emit(ev.PhaseStarted(phase=first))
    try:
        outcome = trainer.run()
        exit_code = outcome.exit_code
        final_state = "finished" if outcome.status == "finished" else "aborted"
    except KeyboardInterrupt:
        exit_code, final_state = ExitCode.INTERRUPTED, "aborted"
        bus.emit(ev.RunFinished(status="interrupted", steps=trainer.step, reason="second SIGINT: stopped at once",
                                checkpoint=trainer.checkpoints.last_checkpoint,
                                resume_command=resume_command(run_dir), exit_code=int(exit_code)))
    except CollectiveTimeout as exc:  # a rank hung: nothing can be saved (a save may be collective); say which
        exit_code, final_state = ExitCode.HUNG, "failed"
        resume = resume_command(run_dir) + _launch(parallel)
        status.update(hung=exc.record(), reason=str(exc), resume_command=resume)
        bus.emit(ev.Warning(text=f"{exc} ({exc.detail})", step=trainer.step))
        bus.emit(ev.RunFinished(status="failed", steps=trainer.step, reason=str(exc),
                                checkpoint=trainer.checkpoints.last_checkpoint, resume_command=resume,
                                exit_code=int(exit_code)))
    except Exception as exc:  # training crashed: say so everywhere, save what can be saved
        text = traceback.format_exc()
        sys.stderr.write(text)
        _log_crash(run_dir, text)
        bus.emit(ev.Warning(text=f"training crashed: {type(exc).__name__}: {exc}", step=trainer.step))
        path = None
        try:  # nothing new to save when it crashed at the step its `last` already holds (e.g. right after resume)
            if trainer.checkpoints.saved_last_at != trainer.step:
                path = trainer.checkpoint(kind="crash")
        except Exception:
            path = None
        exit_code, final_state = ExitCode.POLICY, "failed"
        bus.emit(ev.RunFinished(status="failed", steps=trainer.step, reason=f"{type(exc).__name__}: {exc}",
                                checkpoint=path or trainer.checkpoints.last_checkpoint,
                                resume_command=resume_command(run_dir), exit_code=int(exit_code)))
    finally:
        system.stop()
        if server is not None:
            server.stop()
    status.stop(state=final_state, exit_code=int(exit_code), step=trainer.step)
    bus.close()
    lock.release()
    return int(exit_code)


def _launch(parallel) -> str:
    """The resume command's tail for a torchrun job (its processes per node, from torchrun's environment)."""
    per_node = os.environ.get("LOCAL_WORLD_SIZE", "1") if parallel is not None and parallel.world > 1 else "1"
    return f" --nproc-per-node {per_node}" if per_node != "1" else ""


def _log_crash(run_dir: RunDir, text: str) -> None:
    """Append a crash's traceback to engine.log unless stderr already is engine.log (the dashboard's launch).

    Headless, stderr is a terminal that may be gone (SSH dropped) by the time
    anyone asks why the run died; the run directory is where they will look.
    """
    try:
        log = run_dir.log
        if log.exists():
            here, there = os.fstat(2), os.stat(log)
            if (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino):
                return
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(text)
    except OSError:
        pass  # the traceback is on stderr already; a full disk must not hide the crash's own report


def _guard(config: cfg.RunConfig, parallel=None) -> tuple[cfg.RunConfig, str]:
    """The memory guard (engine.budget.guard): UsageError listing the options when the run is predicted not
    to fit; with --vram-gb the batch is capped instead, and the note says so. Returns (config, note).
    Under torchrun (``parallel``) the prediction is one rank's (engine.budget.layout)."""
    from engine.optim import device as dev
    from engine.budget.guard import check_start
    from engine.budget.layout import SINGLE, Layout
    from engine.budget.measure import device_info

    try:
        device = dev.resolve(config.train.device)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    layout = SINGLE if parallel is None else Layout(parallel.world, getattr(parallel, "strategy", "ddp"))
    result = check_start(config, device_info(device), layout)
    if not result.ok:
        raise UsageError(result.text())
    return result.config, (result.message if result.capped_from is not None else "")


def _status_sink(status):
    def sink(event) -> None:
        if event.type == "state":
            status.update(state=event.state, step=event.step)
        elif event.type == "run_started":
            status.update(total_steps=event.total_steps, step=event.start_step, state="running")
        elif event.type == "eval" and event.best is not None:
            status.update(best=event.best, best_metric=event.primary, last_eval_step=event.step)
        elif event.type == "checkpoint":
            status.update(last_checkpoint=event.path)
    return sink


def _start_server(run_dir: RunDir, controls, bus):
    from engine.run.control.channel import ControlServer

    server = ControlServer(run_dir, controls, bus)
    server.start()
    return server


def main(argv: list[str] | None = None, prog: str = "sensorlm-tui train") -> int:
    """Parse, validate, train; one-line errors with exit 2 for bad input."""
    args = build_parser(prog).parse_args(argv)
    from engine.distributed import launch

    if launch.wanted(args):  # --nproc-per-node: torchrun in its own session, this process waits for it
        return launch.run(args, sys.argv[1:] if argv is None else argv)
    try:
        prepared = prepare(args)
        return run_prepared(prepared)
    except UsageError as exc:
        sys.stderr.write(f"sensorlm-tui: error: {exc}\n")
        return ExitCode.BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
