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
from typing import Any

from tui.screens.confirm import QuitScreen


class Lifecycle:
    """The endings of ``app`` (a DashboardApp): its exit code, the summary line, and when to leave."""

    def __init__(self, app: Any) -> None:
        self.app = app
        #: The line to print after the app exits (how the run ended, checkpoint, resume / attach command).
        self.summary = ""
        #: True when ``summary`` is an error (print it to stderr).
        self.summary_is_error = False
        #: Set by an abort from this viewer: the app exits once the engine has stopped.
        self.exit_when_ended = False
        #: True once "the run ended" was said (a resumed run that ends again is said again).
        self.said_ended = False
        #: Ctrl-C presses so far (the first stops gracefully, the second at once, the third leaves).
        self.interrupts = 0
        self._hangup_installed = False

    def new_session(self) -> None:
        """Another session is watched from now on (a resume): its ending is new."""
        self.said_ended = self.exit_when_ended = False
        self.interrupts = 0

    def leave(self, code: int, summary: str, error: bool = False) -> None:
        """Exit with ``code``, printing ``summary`` after the terminal is restored (to stderr when ``error``)."""
        self.summary, self.summary_is_error = summary, error
        self.app.pump.stop.set()
        self.app.exit(result=code, return_code=code)

    def check_ended(self) -> None:
        """The run may have ended: exit when this viewer aborted it, else say it once (q quits)."""
        model = self.app.model
        if not model.ended:
            self.said_ended = False  # a resumed run (a new generation) may end again and be said again
            return
        if self.exit_when_ended:
            fin = model.finished
            self.leave(fin.exit_code if fin else 0, model.summary())
        elif not self.said_ended:
            self.said_ended = True
            self.app.redraw()  # the final state on every panel now, with the line that says it ended
            self.app.say(f"{model.summary()} — q quits", "info")

    @property
    def will_detach(self) -> bool:
        """True when q leaves an engine running (process mode, attach, read-only, or one still starting)."""
        app, pump = self.app, self.app.pump
        if app.model.ended or pump.closed.is_set():
            return False
        if pump.session is None:
            return not app.in_process
        return app.read_only or app.detachable

    @property
    def stoppable(self) -> bool:
        """True when Ctrl-C stops something: the run, or the engine that is starting."""
        app = self.app
        if app.read_only or app.model.ended or app.pump.closed.is_set():
            return False
        return app.pump.session is not None or not app.in_process

    # ------------------------------------------------------------- q
    def request_quit(self) -> None:
        """q: detach (the engine keeps running: the line says how to attach or stop it); in-process, ask."""
        app, model = self.app, self.app.model
        if isinstance(app.screen, QuitScreen):
            return
        pump = app.pump
        if model.ended or pump.closed.is_set():
            self.leave(self._ended_code(), model.summary() if model.started else "")
        elif pump.session is None:  # still connecting: a starting engine keeps starting, and the line says so
            self.leave(0, self.starting_line("detached"))
        elif app.read_only or app.detachable:
            self.detach()
        else:
            app.push_screen(QuitScreen(app.run_name(), model.step, app.detachable, app.run_dir), self._quit_chosen)

    def _ended_code(self) -> int:
        fin, model = self.app.model.finished, self.app.model
        return fin.exit_code if fin else (1 if model.connection.startswith("failed") else 0)

    def _quit_chosen(self, choice: str | None) -> None:
        if choice is None:
            self.app.say("still watching", "info")
        elif choice == "detach":
            self.detach()
        else:
            self.app.abort_with(choice)

    def detach(self, reason: str = "") -> None:
        """Close the dashboard and leave the engine running; the summary says what it does and how to attach
        or stop it.

        Without a detachable engine (in-process: the Trainer lives in this
        process) closing stops the run; the summary says so and how to resume.
        """
        app, model = self.app, self.app.model
        why = f" ({reason})" if reason else ""
        if not app.detachable and not app.read_only:
            resume = f" · resume: sensorlm-tui train --resume {app.run_dir}" if app.run_dir else ""
            self.leave(0, f"{app.run_name()}: dashboard closed{why} at step {model.step}; the in-process "
                          f"run stops with it{resume}")
            return
        doing = self.engine_doing()
        self.leave(0, f"detached from {app.run_name()} at step {model.step}{why}; the engine keeps running"
                      f"{f' ({doing})' if doing else ''}. {self.attach_or_stop(app.run_dir)}")

    def engine_doing(self) -> str:
        """What the engine is doing, for the detach line: "training · 3.1 steps/s · pid 1234"."""
        model = self.app.model
        state = {"running": "training", "starting": "starting"}.get(model.state, model.state)
        if model.starting_up:
            state = model.startup.phases[-1].phase
        rate = model.steps_per_s() if model.state == "running" else None
        parts = [state] + ([f"{rate:.3g} steps/s"] if rate else [])
        pid = self.engine_pid()
        return " · ".join(parts + ([f"pid {pid}"] if pid else []))

    def engine_pid(self) -> int | None:
        """The engine's pid, from its RunStarted or its launch (None when unknown)."""
        started = self.app.model.started
        return (started.pid if started is not None and started.pid else None) or self.app.pump.start_watch.pid

    def attach_or_stop(self, run_dir: str | None) -> str:
        """"Attach: sensorlm-tui attach DIR · stop: kill -INT PID (it checkpoints first)"."""
        pid = self.engine_pid()
        stop = f" · stop: kill -INT {pid} (it checkpoints first)" if pid else ""
        return f"Attach: sensorlm-tui attach {run_dir or '<run_dir>'}{stop}"

    def starting_line(self, verb: str) -> str:
        """The line for leaving while the engine starts ("" when nothing was started)."""
        watch, model = self.app.pump.start_watch, self.app.model
        if watch.pid is None:
            return ""
        phase = model.startup.phases[-1].phase if model.startup.phases else "starting"
        return (f"{verb} while the engine starts ({phase} · pid {watch.pid}); it keeps starting, then trains. "
                f"{self.attach_or_stop(self.app.run_dir)}")

    # ------------------------------------------------------------- Ctrl-C
    def interrupt(self) -> None:
        """Ctrl-C: stop gracefully; again: stop at once; a third time: leave without waiting. Before the engine
        is connected: stop the engine that is starting. A read-only viewer detaches."""
        app, model, pump = self.app, self.app.model, self.app.pump
        self.interrupts += 1
        if model.ended or pump.closed.is_set():
            self.leave(self._ended_code(), model.summary() if model.started else "")
        elif app.read_only:
            self.detach("Ctrl-C: a read-only viewer cannot stop the run")
        elif pump.session is None:
            self._interrupt_start()
        elif self.interrupts == 1:
            app.abort_with("graceful")
            app.say("Ctrl-C: stopping gracefully (a checkpoint first) — Ctrl-C again stops at once", "pending")
        elif self.interrupts == 2:
            app.abort_with("now")
            app.say("Ctrl-C again: stopping at once, no checkpoint", "pending")
        else:
            pid = self.engine_pid()
            self.leave(130, f"{app.run_name()}: left while the engine stops at step {model.step}"
                            f"{f' (pid {pid})' if pid else ''}; its log: {app.run_dir}/engine.log")

    def _interrupt_start(self) -> None:
        watch = self.app.pump.start_watch
        if self.interrupts == 1 and not self.app.in_process:
            watch.cancel.set()  # the launcher stops the engine (SIGINT) as soon as it has one to stop
            self.app.say("Ctrl-C: stopping the starting engine…" + (f" (pid {watch.pid})" if watch.pid else ""),
                         "pending")
        else:
            self.leave(130, self.starting_line("left"))

    def start_cancelled(self, line: str, exit_code: int) -> None:
        """The starting engine was stopped as asked: one line, its exit code."""
        name = Path(self.app.run_dir).name if self.app.run_dir else self.app.run_name()
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
        app = self.app
        session = app.pump.session
        if app.detachable or session is None:
            self.detach("terminal hung up")
            self._exit_after_hangup(0)
            return
        # In-process the trainer dies with this process: ask it to checkpoint and stop, with the reason the run's
        # log will carry; the session worker then waits for it when it closes the session (InProcessSession.close).
        reason = "terminal hung up (SIGHUP): checkpointed and stopped (in-process mode)"
        session.stop(timeout=0, reason=reason)
        self.leave(130, f"{app.run_name()}: {reason}")
        self._exit_after_hangup(130, session)

    def _exit_after_hangup(self, code: int, session=None) -> None:
        """Make sure this process ends after a hang-up, even if Textual's shutdown does not.

        Measured: a hang-up during start-up left the viewer blocked for good in Textual's shutdown, writing
        escape codes into the writer queue of a terminal that no longer exists. A daemon watchdog ends the
        process 5 s after the normal exit was asked for (after an in-process trainer has checkpointed and
        stopped); when the normal exit works, the process is gone first and the watchdog with it.
        """
        if self.app.is_headless:  # under App.run_test (tests): never end the test runner's process
            return

        def watchdog() -> None:
            if session is not None:
                session.wait(300)  # the in-process trainer checkpoints before we may go
            time.sleep(5.0)
            os._exit(code)

        threading.Thread(target=watchdog, name="hangup-watchdog", daemon=True).start()
