"""The engine process: parse the flags, prepare, train; one line and exit 2 for bad input.

``sensorlm-tui train --headless`` and ``python -m engine`` both end up in
``main``. It never needs a terminal: the dashboard launches this same entry
point detached, with its output in the run's engine.log. What is checked
before anything is written lives in engine.app.prepare; the run itself, step
by step, in engine.app.engine_run.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn

from engine.app.prepare import Prepared, UsageError, prepare
from engine.core.cli_args import OneLineParser, add_train_arguments
from engine.core.exit_codes import ExitCode


def build_parser(prog: str = "sensorlm-tui train") -> argparse.ArgumentParser:
    """The engine's argument parser (the same flags as `sensorlm-tui train`)."""
    parser = OneLineParser(prog=prog, description="Run the training engine headless (plain log lines).")
    add_train_arguments(parser)
    return parser


def run_prepared(prepared: Prepared, parallel=None, **options) -> int:
    """Train ``prepared`` in this process (engine.app.engine_run; ``options`` are its ``Options``); the exit code.

    An fsdp2 run outside torchrun gets a process group of one for its strategy (engine.distributed.fsdp),
    left whatever happens (a group left open aborts the exit)."""
    from engine.app.engine_run import EngineRun, Options

    if parallel is not None or prepared.config.runtime.strategy != "fsdp2":
        return EngineRun(prepared, Options(parallel=parallel, **options)).run()
    from engine.distributed.fsdp import Fsdp2
    from engine.optim import device as dev

    try:
        device = dev.resolve(prepared.config.runtime.device).type
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    parallel = Fsdp2(device, prepared.config.runtime.precision)
    try:
        return EngineRun(prepared, Options(parallel=parallel, **options)).run()
    finally:
        parallel.close()


def main(argv: list[str] | None = None, prog: str = "sensorlm-tui train") -> int:
    """Parse, validate, train; one-line errors with exit 2 for bad input."""
    args = build_parser(prog).parse_args(argv)
    from engine.distributed import launch

    if launch.wanted(args):  # --nproc-per-node: torchrun in its own session, this process waits for it
        from engine.app.job_plan import refusal

        return launch.run(args, sys.argv[1:] if argv is None else argv, preflight=refusal)
    from engine.app.startup import tell_headless
    from engine.run.rundir import STARTUP_ENV

    if not os.environ.get(STARTUP_ENV):  # launched by a dashboard, it told this phase already (engine/__main__)
        tell_headless()
    try:
        prepared = prepare(args)
        return run_prepared(prepared)
    except UsageError as exc:
        sys.stderr.write(f"sensorlm-tui: error: {exc}\n")
        return ExitCode.BAD_INPUT
    except KeyboardInterrupt:  # before the run's own handling began (reading a checkpoint to resume, say)
        sys.stderr.write("sensorlm-tui: interrupted before training began: nothing was trained\n")
        return ExitCode.INTERRUPTED


def exit_now(code: int) -> NoReturn:
    """End this process with ``code`` once a run is over, without the interpreter's module teardown.

    With torch (and sympy, transformers…) loaded, Python's own finalization garbage-collects every module's
    objects one pass after another: 3-4 s of one core after the run's last line on the 2-core box, more under
    load, during which the process is still "alive". A dashboard that exited on a stop (a second Ctrl-C)
    left its engine running that long; a headless run held the shell prompt. Everything the run owes is done
    before this is called (the event log closed and synced, status.json written, the lock released), and the
    atexit handlers still run here (multiprocessing's finalizers release the data workers' semaphores, so
    the resource tracker has nothing to report); only the teardown is skipped. Called by the process's
    entry points only, never by code that may run inside another program (tests, the in-process viewer's
    caller): ``python -m engine`` and the `sensorlm-tui` console script when it trained a run.
    """
    import atexit
    import threading

    for thread in threading.enumerate():  # as a normal exit does first: a thread not marked daemon finishes
        if not thread.daemon and thread is not threading.current_thread():
            thread.join()
    atexit._run_exitfuncs()  # what a normal exit runs next (the public atexit has no "run now")
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # the terminal is gone: nothing to tell it
            pass
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
