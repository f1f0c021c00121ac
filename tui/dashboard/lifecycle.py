"""How the dashboard ends: quit, detach, abort-then-exit, the run ending, and a terminal hang-up.

Quitting while an engine trains asks first (abort gracefully / now, detach
when the engine runs in its own process, or stay); a read-only viewer just
detaches. Every ending goes through ``leave``, which records the line to
print once the terminal is restored (``summary``) and the exit code. A
hang-up (SSH drop) can ask nothing: a process-mode engine is left running,
an in-process trainer is told to checkpoint and stop first.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
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
        self._quit_armed = False
        self._hangup_installed = False

    def new_session(self) -> None:
        """Another session is watched from now on (a resume): its ending is new."""
        self.said_ended = self.exit_when_ended = False

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

    def request_quit(self) -> None:
        """Quit; while training, ask: abort gracefully / now, detach (process mode), or stay."""
        app, model = self.app, self.app.model
        if isinstance(app.screen, QuitScreen):
            return
        pump = app.pump
        if pump.session is None and not pump.closed.is_set() and not self._quit_armed:
            # Still connecting: the engine may be starting and would be left running unseen.
            self._quit_armed = True
            app.say("still connecting to the engine — q again quits anyway (a starting engine keeps running; "
                    "see sensorlm-tui runs)", "warning")
            return
        if model.ended or pump.session is None:
            fin = model.finished
            code = fin.exit_code if fin else (1 if model.connection.startswith("failed") else 0)
            self.leave(code, model.summary() if model.started else "")
            return
        if app.read_only:
            self.detach()
            return
        app.push_screen(QuitScreen(app.run_name(), model.step, app.detachable, app.run_dir), self._quit_chosen)

    def _quit_chosen(self, choice: str | None) -> None:
        if choice is None:
            self.app.say("still watching", "info")
        elif choice == "detach":
            self.detach()
        else:
            self.app.abort_with(choice)

    def detach(self, reason: str = "") -> None:
        """Close the dashboard and leave the engine running; the summary says how to re-attach.

        Without a detachable engine (in-process: the Trainer lives in this
        process) closing stops the run; the summary says so and how to resume.
        """
        app = self.app
        why = f" ({reason})" if reason else ""
        if not app.detachable and not app.read_only:
            resume = f" · resume: sensorlm-tui train --resume {app.run_dir}" if app.run_dir else ""
            self.leave(0, f"{app.run_name()}: dashboard closed{why} at step {app.model.step}; the in-process "
                          f"run stops with it{resume}")
            return
        where = app.run_dir or "<run_dir>"
        self.leave(0, f"detached from {app.run_name()} at step {app.model.step}{why}; the engine keeps "
                      f"running. Re-attach: sensorlm-tui attach {where}")

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
