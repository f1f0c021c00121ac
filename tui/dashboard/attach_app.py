"""The dashboard as `attach` opens it: the same app, plus resuming a run whose engine is gone.

When the run's liveness turns ``crashed`` or ``aborted`` (on opening, or
later while watching) the viewer says so with the resume command, and — for
a viewer that may steer — offers once to resume (ResumeScreen; ``r`` asks
again any time). Resuming launches ``python -m engine --resume <run>`` with
``engine.run.control.launcher.launch`` on a thread worker (it blocks until the engine is
up, a few seconds for torch to import), then switches the dashboard to a
fresh RunClient on the same run directory: the history is re-read from the
log, so the screen shows the whole run, old engine and new. A launch that
fails is reported in the status bar and the log; the viewer stays on the old
run. A read-only viewer only shows the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from textual.binding import Binding
from textual.message import Message

from engine.run.control.client import RunClient
from engine.run.control.session import Session
from engine.run.rundir import RunDir, liveness, resume_command
from tui.dashboard.app import DashboardApp
from tui.dashboard.messages import (
    EventBatch,
    LivenessChanged,
    SessionFailed,
    SessionReady,
    StepsProgress,
)
from tui.screens.dashboard import KEYS, DashboardScreen
from tui.screens.resume import ResumeScreen

#: Liveness answers for which resuming makes sense (``failed`` too, on request: the crash checkpoint).
OFFER_RESUME = ("crashed", "aborted")
RESUMABLE = ("crashed", "aborted", "failed")


class AttachScreen(DashboardScreen):
    """The dashboard screen with ``r`` (resume a stopped run) next to the other keys."""

    BINDINGS = [*KEYS[:-2], Binding("r", "app.resume_run", "resume"), Binding("r", "app.resume_why", "resume",
                                                                             show=False), *KEYS[-2:]]


class ResumeLaunched(Message):
    """The resume launch returned: ``error`` is None when the new engine is up."""

    def __init__(self, error: str | None, pid: int | None = None) -> None:
        super().__init__()
        self.error, self.pid = error, pid


class AttachApp(DashboardApp):
    """DashboardApp over a RunClient on ``run_dir``, able to resume the run and follow the new engine.

    ``launcher`` is ``engine.run.control.launcher.launch`` (tests may pass another
    callable with its signature: ``launcher(argv, run_dir) -> object with .pid``).
    """

    def __init__(self, session_factory: Callable[[], Session], run_dir: Path, *,
                 launcher: Callable | None = None, **kwargs) -> None:
        super().__init__(session_factory, **kwargs)
        self.attach_dir = RunDir(Path(run_dir))
        self._launcher = launcher
        #: Bumped by switch_session; messages of an older session are dropped.
        self._generation = 0
        self.pump.post = self._post_for(0)
        self._offered = False
        self._resuming = False
        self._say_when_ready: str | None = None

    def get_default_screen(self) -> AttachScreen:
        return AttachScreen(id="dashboard")

    # ------------------------------------------------------ session switching
    def _post_for(self, generation: int) -> Callable[[Message], bool]:
        def post(message: Message) -> bool:
            message.attach_generation = generation
            return self.post_message(message)
        return post

    def _stale(self, message: Message) -> bool:
        # prevent_default() stops Textual from calling DashboardApp's handler of the same name.
        if getattr(message, "attach_generation", self._generation) != self._generation:
            message.prevent_default()
            return True
        return False

    def switch_session(self, factory: Callable[[], Session]) -> None:
        """Watch another session from now on: the old one is closed, the model rebuilt from the new history."""
        from tui.dashboard.pump import SessionPump
        from tui.model.dashboard import RunModel

        old = self.pump
        old.stop.set()  # its worker closes the old session after the poll in flight
        self._generation += 1
        self.watch.model = RunModel()
        self.model.set_viewer(read_only=self.read_only)
        self.lifecycle.new_session()
        self._offered = False
        self.watch.pump = SessionPump(factory, self._post_for(self._generation), read_only=self.read_only,
                                      batch_s=old.batch_s)
        self.run_worker(self._pump_body, thread=True, exit_on_error=False, name="session", group="session")
        log = self.dashboard.query_one("#log")  # the new history brings every line again
        log.reset()
        self.redraw(force=True)

    def on_event_batch(self, message: EventBatch) -> None:
        self._stale(message)

    def on_steps_progress(self, message: StepsProgress) -> None:
        self._stale(message)

    def on_session_ready(self, message: SessionReady) -> None:
        if not self._stale(message) and self._say_when_ready:
            # After DashboardApp's own handler has said "connected".
            self.call_after_refresh(self.say, self._say_when_ready, "ok")
            self._say_when_ready = None

    def on_session_failed(self, message: SessionFailed) -> None:
        self._stale(message)

    def on_liveness_changed(self, message: LivenessChanged) -> None:
        if self._stale(message):
            return
        if message.liveness in OFFER_RESUME:
            self.call_after_refresh(self._engine_gone, message.liveness)

    # ----------------------------------------------------------------- resume
    def _engine_gone(self, state: str) -> None:
        if self.watch.exit_when_ended:  # this viewer aborted the run and is closing: nothing to offer
            return
        script = self.own_script()
        if script is not None:  # the engine cannot rebuild someone else's script: say what resumes it
            text = f"{state} at step {self.model.step}; resume it with your own command: {script}"
            self.model.note("warning", text)
            self.say(text, "warning")
            return
        command = resume_command(self.attach_dir)
        text = f"engine not running ({state} at step {self.model.step}); resume: {command}"
        self.model.note("warning", text)
        if self.read_only:
            self.say(f"{text} (read-only viewer: run it yourself)", "warning")
            return
        self.say(f"{text} — r resumes here", "warning")
        if not self._offered and len(self.screen_stack) == 1:
            self._offered = True
            self._offer(state)

    def _offer(self, state: str) -> None:
        last = self.model.checkpoints[-1].path if self.model.checkpoints else None
        self.push_screen(ResumeScreen(self.run_name(), state, self.model.step, last,
                                      resume_command(self.attach_dir)), self._resume_chosen)

    def _resume_chosen(self, resume: bool | None) -> None:
        if resume:
            self.resume_run()
        else:
            self.say(f"watching the stopped run; r resumes, q quits ({resume_command(self.attach_dir)})", "info")

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """``r`` is in the footer only when there is a run to resume here (the engine gone, a viewer that may
        steer, a run the engine can rebuild: not the user's own script); otherwise its hidden twin says why not."""
        if action == "resume_run":  # not for the user's own script: only their command resumes it
            return not self.read_only and self.model.liveness in RESUMABLE and not self.model.own_script
        return super().check_action(action, parameters)

    def action_resume_why(self) -> None:
        """r with nothing to resume: say why."""
        self.action_resume_run()

    def action_resume_run(self) -> None:
        """r: offer to resume when the engine is gone; otherwise say why there is nothing to resume."""
        state = liveness(self.attach_dir)
        if self.own_script() is not None:
            self.say(f"resume: this run is your own script's; run {self.own_script()}", "warning")
        elif self.read_only:
            self.say(f"resume: read-only viewer — controls are disabled; run {resume_command(self.attach_dir)}",
                     "warning")
        elif state == "live":
            self.say("resume: the engine is running — nothing to resume", "warning")
        elif state not in RESUMABLE:
            self.say(f"resume: the run is {state} — nothing to resume", "warning")
        else:
            self._offer(state)

    def own_script(self) -> str | None:
        """The user's own command when the run is another framework's loop (engine.app.integrations), else None."""
        started = self.model.started
        if not self.model.own_script:
            return None
        status = self.attach_dir.read_status() or {}
        return status.get("resume_command") or started.config["integration"].get("command") or "your script"

    def resume_run(self) -> None:
        """Launch an engine resuming this run (on a thread worker); the session switches once it is up."""
        if self._resuming:
            self.say("resume: already starting the engine…", "pending")
            return
        if liveness(self.attach_dir) == "live":  # another viewer resumed it meanwhile: just follow that engine
            self.switch_session(lambda: RunClient(self.attach_dir, read_only=self.read_only))
            self.say("resume: another viewer already resumed the run — following its engine", "info")
            return
        self._resuming = True
        self.say(f"resume: starting {resume_command(self.attach_dir)} …", "pending")
        self.run_worker(self._launch_blocking, thread=True, exit_on_error=False, group="resume", name="resume")

    def _launch_blocking(self) -> None:
        launcher = self._launcher
        try:
            if launcher is None:
                from engine.run.control.launcher import launch as launcher
            engine = launcher(["--resume", str(self.attach_dir.root)], self.attach_dir.root)
        except Exception as exc:  # noqa: BLE001 - LaunchError (one line) or anything else: shown, not raised
            self.post_message(ResumeLaunched(str(exc).splitlines()[0] if str(exc) else type(exc).__name__))
            return
        self.post_message(ResumeLaunched(None, getattr(engine, "pid", None)))

    def on_resume_launched(self, message: ResumeLaunched) -> None:
        self._resuming = False
        if message.error:
            text = f"resume failed: {message.error}"
            self.model.note("error", text)
            self.say(text, "error")
            return
        text = f"resumed: engine pid {message.pid} continues the run"
        self.switch_session(lambda: RunClient(self.attach_dir, read_only=self.read_only))
        self.model.note("info", text)
        self._say_when_ready = text
