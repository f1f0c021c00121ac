"""Signal policy of the engine process, from its first instruction to its exit (main thread of a headless engine).

While the run serves (``install``):

- SIGTERM, first SIGINT: checkpoint at the next step boundary (or inside an
  evaluation, which is cut short, or while a step waits for its first batch,
  which is given up: engine.training.loop), then exit 130 with a resumable state.
- second SIGINT: stop at once (KeyboardInterrupt inside the training), no checkpoint.
- SIGHUP (SSH dropped): by default keep training; stdout/stderr move to the
  run directory's engine.log so nothing is written to a dead terminal.
  ``policies.on_hangup = "stop"`` checkpoints and exits instead.
- SIGUSR1: checkpoint now (cluster schedulers send it before preemption).

Repeated signals. After the second SIGINT a stop at once is under way and more
TERMs and INTs add nothing; once the run has ended (``EngineSignals.end``: the
training returned, its ending is being written) every signal is ignored until
the process exits, with the code its status.json records. A KeyboardInterrupt
raised there landed in the exit's own work: in multiprocessing's atexit
finalizer ("Exception ignored in atexit callback", then "11 leaked semaphore
objects" from the resource tracker), or between the run's end and its status
record. So the second SIGINT raises only inside ``interruptible()``, around the
training itself; elsewhere it asks for the same stop and the loop ends at its
next boundary. Inside the training too, a signal can land in a finalizer that
the garbage collector runs (a ``__del__``, multiprocessing's or weakref's
``Finalize``, as a DataLoader's queues are collected): Python prints what it
raises there as "Exception ignored in ..." with a traceback, and drops it. So a
handler interrupting a finalizer (``_in_finalizer``) raises nothing; the stop it
asked for ends the step at its boundary, a step later than a raise would.

A hang-up from the first instruction (``catch_hangup``). Python leaves SIGHUP
(and SIGUSR1) at its default, which ends the process: an SSH drop in the first seconds of a
headless run (importing torch, predicting memory) killed it with 129, no
message and no run directory, whatever ``on_hangup`` said. So
``engine/__main__.py`` and the console script's ``train`` catch it before
anything heavy is imported. A hang-up then is noted (from a real terminal,
output goes to /dev/null at once: the terminal is gone and the run directory
does not exist yet); once the config is read (``starting_policy``) it follows
``on_hangup``: ``continue`` trains on and the run's log says so as soon as it
opens, ``stop`` ends the start-up as a Ctrl-C does (one line, exit 130,
nothing trained, or the run directory closed properly once it is the engine's).

Torch-free and light at import: the entry points import it before anything else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Callable, Iterator

#: What output goes to after a hang-up heard before the run directory exists.
DEVNULL = Path(os.devnull)


class _EarlyHangup:
    """A hang-up heard before the run's own handlers were installed (one per process)."""

    def __init__(self) -> None:
        #: ``catch_hangup`` ran in this process; whether stdout or stderr was a terminal then.
        self.caught = self.had_terminal = False
        self.heard = self.usr1 = False
        #: ``policies.on_hangup`` once the config is read, and how the start-up stops (``starting_policy``).
        self.policy: str | None = None
        self.stop: Callable[[], None] | None = None


_early = _EarlyHangup()


def _has_terminal() -> bool:
    try:
        return sys.stdout.isatty() or sys.stderr.isatty()
    except (AttributeError, ValueError):  # a stream replaced or closed
        return False


def _redirect_output(log_path: Path) -> None:
    """Point fds 1 and 2 (and so sys.stdout/err) at ``log_path``: the terminal is gone."""
    from engine.core.safe_files import open_for_write

    try:
        fd = open_for_write(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)  # never through a link
    except OSError:
        fd = os.open(os.devnull, os.O_WRONLY)
    for target in (1, 2):
        try:
            os.dup2(fd, target)
        except OSError:
            pass
    os.close(fd)


def catch_hangup() -> None:
    """From now on neither a hang-up nor a SIGUSR1 ends this process (the module docstring): the entry points'
    first call. SIGUSR1 asks for a checkpoint, and until the run serves there is none to write."""
    _early.caught, _early.had_terminal = True, _has_terminal()
    signal.signal(signal.SIGHUP, _hangup_while_starting)
    signal.signal(signal.SIGUSR1, _usr1_while_starting)


def _usr1_while_starting(signum, frame) -> None:
    _early.usr1 = True


def _hangup_while_starting(signum, frame) -> None:
    if not _early.heard and _early.had_terminal:
        _redirect_output(DEVNULL)  # before anything is written to the dead terminal (EIO)
    _early.heard = True
    if _early.policy == "stop" and _early.stop is not None:
        _early.stop()


def starting_policy(on_hangup: str, stop: Callable[[], None]) -> None:
    """The config is read: a hang-up heard so far, or until the run's handlers are installed, follows
    ``on_hangup``; ``stop()`` ends the start-up (called here at once when a hang-up came already)."""
    _early.policy, _early.stop = on_hangup, stop
    if _early.heard and on_hangup == "stop":
        stop()


def hung_up() -> bool:
    """True when this process heard a hang-up before its run's handlers were installed."""
    return _early.heard


#: (file name ending, function) of the finalizers the garbage collector calls, besides any ``__del__``: what a
#: KeyboardInterrupt raised in them becomes an "Exception ignored" traceback (the module docstring).
FINALIZERS = ((os.path.join("multiprocessing", "util.py"), "__call__"), ("weakref.py", "__call__"))


def _in_finalizer(frame) -> bool:
    """True when ``frame`` (where a signal interrupted the main thread) or a caller of it is a finalizer."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__" or any(code.co_filename.endswith(file) and code.co_name == function
                                            for file, function in FINALIZERS):
            return True
        frame = frame.f_back
    return False


class EngineSignals:
    """The handlers of one run: ``install`` them once it serves, train ``interruptible()``, ``end`` when it ends.

    ``controls`` (engine.run.control.requests.Controls) takes the stops; ``note(text)`` logs a line (the run's
    event bus: its console and its log)."""

    def __init__(self, controls, on_hangup: str, log_path: Path, note: Callable[[str], None] = print) -> None:
        self.controls, self.on_hangup, self.log_path, self.note = controls, on_hangup, log_path, note
        # Decided before any hang-up (at the first instruction when it was caught there): after a real hang-up
        # the tty fds are dead and isatty() is False, which made a hung-up engine think it never had a terminal
        # and keep writing into the void.
        self.had_terminal = _early.had_terminal if _early.caught else _has_terminal()
        self.interrupts = 0
        self._interruptible = self._stopped_at_once = self._ended = False

    def install(self) -> "EngineSignals":
        """Install the handlers (main thread only); a hang-up heard while starting is acted on now."""
        signal.signal(signal.SIGTERM, self.on_term)
        signal.signal(signal.SIGINT, self.on_term)
        signal.signal(signal.SIGHUP, self.on_hup)
        signal.signal(signal.SIGUSR1, self.on_usr1)
        if _early.heard:
            self.hang_up(" while starting")
        if _early.usr1:
            self.note("SIGUSR1 while starting: nothing to checkpoint yet")
        return self

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        """Inside: the second SIGINT raises KeyboardInterrupt, and a stop may give up a step's first batch."""
        self._interruptible = True
        try:
            yield
        finally:
            self._interruptible = False

    def end(self) -> None:
        """The training is over: every signal is ignored from now until the process exits."""
        self._ended = True
        self._interruptible = False

    def on_term(self, signum, frame) -> None:
        """SIGTERM and SIGINT."""
        if self._ended or self._stopped_at_once:
            return  # the ending is under way: nothing a signal adds (the module docstring)
        if signum == signal.SIGINT:
            self.interrupts += 1
            if self.interrupts >= 2:
                self._stopped_at_once = True
                self.controls.request_stop("second SIGINT: stopped at once, no checkpoint")
                if self._interruptible and not _in_finalizer(frame):
                    raise KeyboardInterrupt
                return
        from engine.core.exit_codes import ExitCode

        self.controls.request_graceful(f"{signal.Signals(signum).name}: checkpointed and stopped",
                                       ExitCode.INTERRUPTED)
        if self._interruptible:
            self.controls.interrupt_build()  # raises when the loop waits for a step's first batch

    def on_hup(self, signum, frame) -> None:
        """SIGHUP."""
        if not self._ended:
            self.hang_up()

    def hang_up(self, when: str = "") -> None:
        """The terminal went away (``when``: " while starting" for one heard before ``install``)."""
        if not self.had_terminal and self.on_hangup == "continue":
            self.note(f"SIGHUP{when}: no terminal attached; training goes on")
            return
        _redirect_output(self.log_path)
        if self.on_hangup == "stop":
            from engine.core.exit_codes import ExitCode

            self.note(f"SIGHUP{when}: terminal gone; checkpointing and stopping (--on-hangup stop)")
            self.controls.request_graceful("SIGHUP: checkpointed and stopped (--on-hangup stop)", ExitCode.INTERRUPTED)
        else:
            self.note(f"SIGHUP{when}: terminal gone; training goes on, output now in {self.log_path}")

    def on_usr1(self, signum, frame) -> None:
        """SIGUSR1: a checkpoint at the next boundary."""
        if not self._ended:
            from engine.run.control.requests import checkpoint_now

            self.controls.submit(checkpoint_now())


def install(controls, on_hangup: str, log_path: Path, note: Callable[[str], None] = print) -> EngineSignals:
    """Install a run's handlers (``EngineSignals``) and return them."""
    return EngineSignals(controls, on_hangup, log_path, note).install()
