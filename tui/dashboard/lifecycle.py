"""How the dashboard ends: Ctrl-C, q, abort-then-exit, the run ending, and a terminal hang-up.

The rule, stated in the help and the README: **Ctrl-C stops the run, q
leaves it running.**

- Ctrl-C stops gracefully (a checkpoint, then the app exits with one line
  saying so); a second Ctrl-C stops at once (no checkpoint, exit 130); a
  third leaves without waiting. Before the engine is connected, Ctrl-C stops
  the engine that is starting (engine.run.control.launcher: SIGINT, exit 130,
  nothing trained). A read-only viewer cannot stop anything: Ctrl-C detaches.
- q detaches, and the line printed says what the engine is doing (its state
  or start-up phase, its pid) and how to attach or stop it; while starting
  too, so no engine is ever left running unseen. In-process the trainer lives
  in this process: q asks (abort gracefully / now, or stay).

Every ending goes through ``leave``, which records the line to print once the
terminal is restored (``summary``) and the exit code. A hang-up (SSH drop) can
ask nothing: a process-mode engine is left running, an in-process trainer is
told to checkpoint and stop first.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path
from typing import Callable

from engine.core.fmt import number
from engine.core.invocation import command
from tui.dashboard.watch import Watch
from tui.screens.confirm import QuitScreen


class Lifecycle:
    """The endings of one dashboard: its exit code, the summary line, and when to leave.

    ``watch`` is what the dashboard watches; it acts through ``say`` (the status bar), ``redraw`` (every panel
    now), ``exit(code)`` (Textual's exit with that return code), ``push_screen`` (a modal and its result
    callback), ``abort_with(mode)`` (the abort control) and ``headless()`` (True under Textual's test runner).
    """

    def __init__(self, watch: Watch, *, say: Callable[..., None], redraw: Callable[[], None],
                 exit: Callable[[int], None], push_screen: Callable, abort_with: Callable[[str], None],
                 headless: Callable[[], bool]) -> None:
        self.watch = watch
        self.say, self.redraw, self.exit, self.push_screen = say, redraw, exit, push_screen
        self.abort_with, self.headless = abort_with, headless
        #: The line to print after the app exits (how the run ended, checkpoint, resume / attach command).
        self.summary = ""
        #: True when ``summary`` is an error (print it to stderr).
        self.summary_is_error = False
        #: True once "the run ended" was said (a resumed run that ends again is said again).
        self.said_ended = False
        #: Ctrl-C presses so far (the first stops gracefully, the second at once, the third leaves).
        self.interrupts = 0
        self._hangup_installed = False

    def new_session(self) -> None:
        """Another session is watched from now on (a resume): its ending is new."""
        self.said_ended = self.watch.exit_when_ended = False
        self.interrupts = 0

    def leave(self, code: int, summary: str, error: bool = False) -> None:
        """Exit with ``code``, printing ``summary`` after the terminal is restored (to stderr when ``error``)."""
        self.summary, self.summary_is_error = summary, error
        self.watch.pump.stop.set()
        self.exit(code)

    def check_ended(self) -> None:
        """The run may have ended: exit when this viewer aborted it, else say it once (q quits)."""
        model = self.watch.model
        if not model.ended:
            self.said_ended = False  # a resumed run (a new generation) may end again and be said again
            return
        if self.watch.exit_when_ended:
            fin = model.finished
            self.leave(fin.exit_code if fin else 0, model.summary())
        elif not self.said_ended:
            self.said_ended = True
            self.redraw()  # the final state on every panel now, with the line that says it ended
            self.say(f"{model.summary()} — q quits", "info")

    # ------------------------------------------------------------- q
    def request_quit(self) -> None:
        """q: detach (the engine keeps running: the line says how to attach or stop it); in-process, ask."""
        watch, model = self.watch, self.watch.model
        if model.ended or watch.closed:
            self.leave(watch.ended_code(), model.summary() if model.started else "")
        elif watch.session is None:  # still connecting: a starting engine keeps starting, and the line says so
            self.leave(0, self.starting_line("detached"))
        elif watch.read_only or watch.detachable:
            self.detach()
        else:
            self.push_screen(QuitScreen(watch.run_name(), model.step, watch.detachable, watch.run_dir),
                             self._quit_chosen)

    def _quit_chosen(self, choice: str | None) -> None:
        if choice is None:
            self.say("still watching", "info")
        elif choice == "detach":
            self.detach()
        else:
            self.abort_with(choice)

    def detach(self, reason: str = "") -> None:
        """Close the dashboard and leave the engine running; the summary says what it does and how to attach
        or stop it.

        Without a detachable engine (in-process: the Trainer lives in this
        process) closing stops the run; the summary says so and how to resume.
        """
        watch, model = self.watch, self.watch.model
        why = f" ({reason})" if reason else ""
        if not watch.detachable and not watch.read_only:
            resume = f" · resume: {command('train', '--resume', watch.run_dir)}" if watch.run_dir else ""
            self.leave(0, f"{watch.run_name()}: dashboard closed{why} at step {model.step}; the in-process "
                          f"run stops with it{resume}")
            return
        doing = self.engine_doing()
        self.leave(0, f"detached from {watch.run_name()} at step {model.step}{why}; the engine keeps running"
                      f"{f' ({doing})' if doing else ''}. {self.attach_or_stop(watch.run_dir)}")

    def engine_doing(self) -> str:
        """What the engine is doing, for the detach line: "training · 3.1 steps/s · pid 1234"."""
        model = self.watch.model
        state = {"running": "training", "starting": "starting"}.get(model.state, model.state)
        if model.starting_up:
            state = model.startup.phases[-1].phase
        rate = model.steps_per_s() if model.state == "running" else None
        parts = [state] + ([f"{number(rate)} steps/s"] if rate else [])
        pid = self.watch.engine_pid()
        return " · ".join(parts + ([f"pid {pid}"] if pid else []))

    def attach_or_stop(self, run_dir: str | None) -> str:
        """"Attach: sensorlm-tui attach DIR · stop: kill -INT PID (it checkpoints first)", the program written
        as it runs from here (engine.core.invocation)."""
        pid = self.watch.engine_pid()
        stop = f" · stop: kill -INT {pid} (it checkpoints first)" if pid else ""
        return f"Attach: {command('attach', run_dir) if run_dir else command('attach') + ' <run_dir>'}{stop}"

    def starting_line(self, verb: str) -> str:
        """The line for leaving while the engine starts ("" when nothing was started)."""
        start, model = self.watch.pump.start_watch, self.watch.model
        if start.pid is None:
            return ""
        phase = model.startup.phases[-1].phase if model.startup.phases else "starting"
        return (f"{verb} while the engine starts ({phase} · pid {start.pid}); it keeps starting, then trains. "
                f"{self.attach_or_stop(self.watch.run_dir)}")

    # ------------------------------------------------------------- Ctrl-C
    def interrupt(self) -> None:
        """Ctrl-C: stop gracefully; again: stop at once; a third time: leave without waiting. Before the engine
        is connected: stop the engine that is starting. A read-only viewer detaches."""
        watch, model = self.watch, self.watch.model
        self.interrupts += 1
        if model.ended or watch.closed:
            self.leave(watch.ended_code(), model.summary() if model.started else "")
        elif watch.read_only:
            self.detach("Ctrl-C: a read-only viewer cannot stop the run")
        elif watch.session is None:
            self._interrupt_start()
        elif self.interrupts == 1:
            self.abort_with("graceful")
            self.say("Ctrl-C: stopping gracefully (a checkpoint first) — Ctrl-C again stops at once", "pending")
        elif self.interrupts == 2:
            self.abort_with("now")
            self.say("Ctrl-C again: stopping at once, no checkpoint", "pending")
        else:
            pid = watch.engine_pid()
            self.leave(130, f"{watch.run_name()}: left while the engine stops at step {model.step}"
                            f"{f' (pid {pid})' if pid else ''}; its log: {watch.run_dir}/engine.log")

    def _interrupt_start(self) -> None:
        start = self.watch.pump.start_watch
        if self.interrupts == 1 and not self.watch.in_process:
            start.cancel.set()  # the launcher stops the engine (SIGINT) as soon as it has one to stop
            self.say("Ctrl-C: stopping the starting engine…" + (f" (pid {start.pid})" if start.pid else ""),
                     "pending")
        else:
            self.leave(130, self.starting_line("left"))

    def start_cancelled(self, line: str, exit_code: int) -> None:
        """The starting engine was stopped as asked: one line, its exit code."""
        name = Path(self.watch.run_dir).name if self.watch.run_dir else self.watch.run_name()
        self.leave(exit_code, f"{name}: {line}")

    # ------------------------------------------------------------- hang-up
    def install_hangup(self) -> None:
        """Handle SIGHUP on the app's loop: Textual installs no handler, and without one an SSH drop kills the
        viewer before any cleanup."""
        try:
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self.on_hangup)
            self._hangup_installed = True
        except (NotImplementedError, RuntimeError, ValueError, AttributeError):
            pass  # not the main thread, or no SIGHUP on this platform

    def remove_hangup(self) -> None:
        """Take the SIGHUP handler off the loop again (the app is going)."""
        if not self._hangup_installed:
            return
        try:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        except (RuntimeError, ValueError):
            pass
        self._hangup_installed = False

    def on_hangup(self) -> None:
        """The terminal is gone: nothing can be drawn or asked; detach (a process-mode engine keeps training)."""
        watch = self.watch
        session = watch.session
        if watch.detachable or session is None:
            self.detach("terminal hung up")
            self._exit_after_hangup(0)
            return
        # In-process the trainer dies with this process: ask it to checkpoint and stop, with the reason the run's
        # log will carry; the session worker then waits for it when it closes the session (InProcessSession.close).
        reason = "terminal hung up (SIGHUP): checkpointed and stopped (in-process mode)"
        session.stop(timeout=0, reason=reason)
        self.leave(130, f"{watch.run_name()}: {reason}")
        self._exit_after_hangup(130, session)

    def _exit_after_hangup(self, code: int, session=None) -> None:
        """Make sure this process ends after a hang-up, even if Textual's shutdown does not.

        Measured: a hang-up during start-up left the viewer blocked for good in Textual's shutdown, writing
        escape codes into the writer queue of a terminal that no longer exists. A daemon watchdog ends the
        process 5 s after the normal exit was asked for (after an in-process trainer has checkpointed and
        stopped); when the normal exit works, the process is gone first and the watchdog with it.
        """
        if self.headless():  # under App.run_test (tests): never end the test runner's process
            return

        def watchdog() -> None:
            if session is not None:
                session.wait(300)  # the in-process trainer checkpoints before we may go
            time.sleep(5.0)
            os._exit(code)

        threading.Thread(target=watchdog, name="hangup-watchdog", daemon=True).start()
