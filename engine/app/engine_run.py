"""One engine run, step by step: guard, build, own the run directory, wire the sinks, serve, train, end.

Each step is a method of ``EngineRun`` so the order reads at a glance in
``run()`` and each step's failure modes sit beside it:

- the guard and the build happen before anything is written, so bad input
  (a config that cannot fit, a damaged data file) leaves no litter;
- the lock is the first file written into the run directory: a second engine
  stops there;
- start-up phases (PhaseStarted) go out as they begin (engine.app.startup:
  live sinks, the console, the launcher's start-up file) and into the event
  log once it exists, so a viewer sees what the first seconds go into while
  they pass;
- a Ctrl-C during start-up (or an in-process viewer's stop, at the next
  phase) ends the engine there: one line, exit 130, the lock released;
- the three crash endings (a second Ctrl-C, a hung rank, an exception) each
  say so in the log and leave the resume command.

The in-process dashboard runs this in a worker thread with its own
``controls`` and an in-memory sink in ``extra_sinks`` (no signal handlers, no
console). Under torchrun it is rank 0's path, with ``parallel`` the strategy
(engine.distributed.parallel): the other ranks get the config it settles on.
"""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass

from engine.app.prepare import Prepared, UsageError, refuse_existing, settle_resumed_batch
from engine.app.signals import EngineSignals, starting_policy
from engine.app.startup import StartupPhases, StartupStopped
from engine.core import config as cfg
from engine.core.exit_codes import ExitCode
from engine.core.fmt import printable
from engine.core.safe_files import open_for_write
from engine.run import events as ev
from engine.run.rundir import RunDir, RunDirError, resume_command


@dataclass
class Options:
    """How this process hosts the run (headless engine, in-process dashboard, rank 0 of a job)."""

    console: bool = True
    install_signals: bool = True
    serve_controls: bool = True
    controls: object | None = None
    extra_sinks: tuple = ()
    ui_shares_machine: bool = False
    parallel: object | None = None


class EngineRun:
    """The run of one prepared config in this process; ``run()`` returns its exit code."""

    def __init__(self, prepared: Prepared, options: Options) -> None:
        from engine.run.control.requests import Controls
        from engine.run.sinks import ConsoleSink

        self.prepared, self.options = prepared, options
        self.parallel = options.parallel
        self.controls = options.controls or Controls()
        self.console = ConsoleSink(sys.stdout, print_every=prepared.config.train.print_every) \
            if options.console else None
        self.startup = StartupPhases.from_environment(options.extra_sinks, self.console, self.controls.stopping)
        self.signals = EngineSignals(self.controls, prepared.config.policies.on_hangup, prepared.run_dir.log,
                                     note=lambda text: self.bus.emit(ev.Warning(text=text)))
        if options.install_signals:
            self.startup.catch_signals()  # Ctrl-C while starting: one line, 130 (engine.app.signals takes over)
            # a hang-up (from the first instruction: engine.app.signals) follows the run's on_hangup from here
            starting_policy(prepared.config.policies.on_hangup,
                            lambda: self.startup.stop_now("SIGHUP (policies.on_hangup = stop)"))
        self.server = self.system = self.lock = self.status = None

    def run(self) -> int:
        """Start, train and end; UsageError before anything is written, 130 when stopped while starting."""
        try:
            self.start()
        except (KeyboardInterrupt, StartupStopped):
            return self.stopped_starting()
        try:
            exit_code, final_state = self.train()
        finally:
            self.system.stop()
            if self.server is not None:
                self.server.stop()
        self.status.stop(state=final_state, exit_code=int(exit_code), step=self.trainer.step)
        self.bus.close()
        self.lock.release()
        return int(exit_code)

    def start(self) -> None:
        """Guard, build, open the run directory, serve; each phase told as it begins."""
        self.startup.begin("importing torch")
        import torch  # noqa: F401 - its own phase: seconds on a cold cache, the first thing a user waits for

        self.config, guard_note = self.guard()
        self.build()
        jsonl = self.open_run_dir()
        self.attach_sinks(jsonl, [*self.prepared.notes, self.prepared.note, guard_note])
        self.serve()

    def stopped_starting(self) -> int:
        """Stopped while starting (Ctrl-C, or an in-process viewer's stop): nothing was trained; one line, 130."""
        opened = self.status is not None
        finished = self.startup.stopped(resume_command(self.prepared.run_dir) if opened else None)
        for part in (self.system, self.server):
            if part is not None:
                part.stop()
        if opened:  # the run directory is this engine's: its log and status say how it ended
            self.bus.emit(finished)
            self.status.stop(state="aborted", exit_code=finished.exit_code, step=0)
            self.bus.close()
        else:  # no event log yet: the viewers listening live and the console hear it
            self.startup.tell(finished, with_console=True)
            self.startup.retire_file()
        if self.lock is not None:
            self.lock.release()
        return finished.exit_code

    # -- before anything is written ---------------------------------------------------
    def guard(self) -> tuple[cfg.RunConfig, str]:
        """The memory guard's verdict on the config (per rank under torchrun), shared with the other ranks."""
        from engine.core.registry import TaskLoadError, load_task_class
        from engine.tasks.protocol import TaskError

        self.startup.begin("predicting memory")
        many = self.parallel is not None and self.parallel.world > 1
        try:  # the guard's trace builds the task first, so a task's bad input (a damaged data file) surfaces here
            load_task_class(self.prepared.config.task.name)  # a plugin's missing class: one line, not a trace error
            config, note = guarded_config(self.prepared.config, self.parallel)
        except (TaskError, UsageError, TaskLoadError) as exc:
            if many:  # the other ranks wait for the config: tell them there is none, so they exit quietly
                self.parallel.broadcast({"refused": True})
            raise UsageError(str(exc) if isinstance(exc, UsageError) else str(exc).splitlines()[0]) from None
        if many:
            self.parallel.broadcast(config.model_dump(mode="json"))  # the others train what the guard let through
        if self.prepared.resume is not None:
            settle_resumed_batch(self.prepared.resume, config)
        return config, note

    def build(self) -> None:
        """The Trainer with its data, model and optimizer (UsageError for a task's bad input)."""
        from engine.checkpoint.format import CheckpointError
        from engine.run.sinks import EventBus
        from engine.tasks.protocol import TaskError
        from engine.training.loop import Trainer

        config, run_dir = self.config, self.prepared.run_dir
        self.bus = EventBus()
        try:  # a bad fault spec (a test hook) is bad input too; then data, model and optimizer
            # on_step reads `status` when steps run, after the run directory and its status record exist.
            self.trainer = Trainer(config, self.bus, self.controls, checkpoint_dir=run_dir.checkpoints,
                                   resume=self.prepared.resume, name=run_dir.name, run_dir=run_dir.root,
                                   on_step=lambda step: self.status.set_step(step), parallel=self.parallel)
            if self.parallel is not None and hasattr(self.controls, "bind"):
                # engine.distributed.controls: telemetry where the controls land
                self.controls.bind(lambda: self.trainer.step, self.bus.emit)
            self.startup.begin("building data and model", f"{config.task.name}/{config.task.preset}")
            self.trainer.setup()
        except (TaskError, CheckpointError, ValueError) as exc:
            raise UsageError(str(exc).splitlines()[0]) from None

    # -- the run directory ----------------------------------------------------------
    def open_run_dir(self):
        """Lock, create and describe the run directory; its events.jsonl sink (UsageError when it cannot)."""
        from engine.run.runlock import RunLock
        from engine.run.sinks import JsonlSink

        run_dir = self.prepared.run_dir
        self.startup.owning_dir()
        try:
            self.lock = RunLock.acquire(run_dir)  # the first file written there; a second engine stops here
            if self.prepared.fresh:
                refuse_existing(run_dir)  # again, now that no other engine can be creating it
            else:
                run_dir.check_own_entries()
            run_dir.create()
            if self.prepared.resume is None:
                write_config(run_dir, cfg.dump_toml(self.config))
            return JsonlSink(run_dir.events, warn=lambda text: self.bus.emit(ev.Warning(text=text)))
        except (RunDirError, UsageError, OSError) as exc:
            if self.lock is not None:
                self.lock.release()
            if isinstance(exc, (RunDirError, UsageError)):
                raise UsageError(str(exc)) from None
            raise UsageError(f"{printable(exc.filename or run_dir.root)}: cannot write the run directory "
                             f"({exc.strerror})") from None

    def attach_sinks(self, jsonl, notes: list[str | None]) -> None:
        """Events to the log, the status record, the console; the phases (told live already) into the log first,
        then the notes held until now."""
        from engine.run.offthread import run_records

        run_dir = self.prepared.run_dir
        # The log, the status record and the console encode and write on a drainer thread: at fast steps their
        # work on the training thread was the engine's largest per-step cost (engine.run.offthread).
        self.status, records = run_records(run_dir, jsonl, self.console)
        self.startup.hand_over([jsonl])
        for sink in [records, *self.options.extra_sinks]:
            self.bus.add(sink)
        for note in notes:
            if note:
                self.bus.emit(ev.Warning(text=note))
        self.status.update(resume_command=resume_command(run_dir), run_id=self.config.run_id)
        self.status.start()

    def serve(self) -> None:
        """The control channel, signal handlers, the system sampler, and the core left to viewers."""
        from engine.training.system import SystemSampler

        if self.options.serve_controls:
            from engine.run.control.channel import ControlServer
            from engine.run.control.wire import ChannelError

            try:
                self.server = ControlServer(self.prepared.run_dir, self.controls, self.bus,
                                            run_id=self.config.run_id).start()
            except ChannelError as exc:  # the socket cannot be bound: the run ends as failed, in one line
                self.unserved(str(exc))
                raise UsageError(str(exc)) from None
        if self.options.install_signals:
            self.signals.install()
        # The data plan (engine.training.threads) leaves a core to viewers on this machine.
        shares, server = int(self.options.ui_shares_machine), self.server
        self.trainer.prefetch.viewers = lambda: shares + (server.viewers() if server is not None else 0)
        self.system = SystemSampler(self.bus.emit).start()  # CPU/RAM/GPU load for viewers, every 2 s

    def unserved(self, reason: str) -> None:
        """The control channel could not open: the run directory records a failed start (not a crash), closed."""
        self.bus.emit(ev.RunFinished(status="failed", steps=self.trainer.step, reason=reason,
                                     exit_code=int(ExitCode.BAD_INPUT)))
        self.status.stop(state="failed", exit_code=int(ExitCode.BAD_INPUT), step=self.trainer.step)
        self.bus.close()
        self.lock.release()

    # -- training and its endings ---------------------------------------------------
    def train(self) -> tuple[int, str]:
        """(exit code, final state) of the training, whatever ends it."""
        from engine.distributed.parallel import CollectiveTimeout

        first = "restoring state, first step" if self.prepared.resume is not None else "first evaluation, first step"
        self.bus.emit(ev.PhaseStarted(phase=first))
        outcome = None
        try:
            try:
                with self.signals.interruptible():  # the second SIGINT stops at once only in here
                    outcome = self.trainer.run()
            finally:
                self.signals.end()  # no signal cuts the ending short: the exit code is the one status.json records
        except KeyboardInterrupt:
            if outcome is None:  # (one that came as the training returned changes nothing)
                return self.interrupted()
        except CollectiveTimeout as exc:
            return self.hung(exc)
        except Exception as exc:
            return self.crashed(exc)
        return outcome.exit_code, "finished" if outcome.status == "finished" else "aborted"

    def interrupted(self) -> tuple[int, str]:
        """A second SIGINT: stopped at once, no save."""
        code = ExitCode.INTERRUPTED
        self.bus.emit(ev.RunFinished(status="interrupted", steps=self.trainer.step,
                                     reason="second SIGINT: stopped at once",
                                     checkpoint=self.trainer.checkpoints.last_checkpoint,
                                     checkpoint_step=self.trainer.checkpoints.last_checkpoint_step,
                                     resume_command=resume_command(self.prepared.run_dir), exit_code=int(code)))
        return code, "aborted"

    def hung(self, exc) -> tuple[int, str]:
        """A rank hung: nothing can be saved (a save may be collective); say which."""
        code = ExitCode.HUNG
        resume = resume_command(self.prepared.run_dir) + launch_tail(self.parallel)
        self.status.update(hung=exc.record(), reason=str(exc), resume_command=resume)
        self.bus.emit(ev.Warning(text=f"{exc} ({exc.detail})", step=self.trainer.step))
        self.bus.emit(ev.RunFinished(status="failed", steps=self.trainer.step, reason=str(exc),
                                     checkpoint=self.trainer.checkpoints.last_checkpoint,
                                     checkpoint_step=self.trainer.checkpoints.last_checkpoint_step,
                                     resume_command=resume, exit_code=int(code)))
        return code, "failed"

    def crashed(self, exc: Exception) -> tuple[int, str]:
        """Training raised: say so everywhere, save what can be saved."""
        trainer, run_dir = self.trainer, self.prepared.run_dir
        text = traceback.format_exc()
        sys.stderr.write(text)
        log_crash(run_dir, text)
        self.bus.emit(ev.Warning(text=f"training crashed: {type(exc).__name__}: {exc}", step=trainer.step))
        path = None
        try:  # nothing new to save when it crashed at the step its `last` already holds (e.g. right after resume)
            if trainer.checkpoints.saved_last_at != trainer.step:
                path = trainer.checkpoint(kind="crash")
        except Exception:
            path = None
        code = ExitCode.POLICY
        self.bus.emit(ev.RunFinished(status="failed", steps=trainer.step, reason=f"{type(exc).__name__}: {exc}",
                                     checkpoint=path or trainer.checkpoints.last_checkpoint,
                                     checkpoint_step=trainer.step if path else trainer.checkpoints.last_checkpoint_step,
                                     resume_command=resume_command(run_dir), exit_code=int(code)))
        return code, "failed"


def write_config(run_dir: RunDir, text: str) -> None:
    """config.toml of a run being created (atomic: a full disk leaves none, never an empty one, and a retry is a
    fresh start); UsageError naming it when it cannot be written."""
    try:
        run_dir.write_config(text)
    except OSError as exc:
        raise UsageError(f"{printable(run_dir.config)}: cannot write ({exc.strerror}); nothing of the run was "
                         "written, so the same command starts it again once that is fixed") from None


def guarded_config(config: cfg.RunConfig, parallel=None) -> tuple[cfg.RunConfig, str]:
    """The memory guard (engine.budget.guard): UsageError listing the options when the run is predicted not
    to fit; with --vram-gb the batch is capped instead, and the note says so. Returns (config, note).
    Under torchrun (``parallel``) the prediction is one rank's (engine.budget.layout)."""
    from engine.budget.guard import check_start
    from engine.budget.layout import SINGLE, Layout
    from engine.budget.measure import device_info
    from engine.optim import device as dev

    try:
        device = dev.resolve(config.runtime.device)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    layout = SINGLE if parallel is None else Layout(parallel.world, getattr(parallel, "strategy", "ddp"))
    result = check_start(config, device_info(device), layout)
    if not result.ok:
        raise UsageError(result.text())
    notes = ([result.message] if result.capped_from is not None else []) + result.notes
    return result.config, "; ".join(notes)


def launch_tail(parallel) -> str:
    """The resume command's tail for a torchrun job (its processes per node, from torchrun's environment)."""
    per_node = os.environ.get("LOCAL_WORLD_SIZE", "1") if parallel is not None and parallel.world > 1 else "1"
    return f" --nproc-per-node {per_node}" if per_node != "1" else ""


def log_crash(run_dir: RunDir, text: str) -> None:
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
        fd = open_for_write(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        with os.fdopen(fd, "a", encoding="utf-8") as handle:
            handle.write(text)
    except OSError:
        pass  # the traceback is on stderr already; a full disk must not hide the crash's own report

