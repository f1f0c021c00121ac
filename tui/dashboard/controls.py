"""The dashboard's controls: pause / resume, checkpoint, abort, tune, autotune, each sent without blocking the UI.

A control is sent from a short-lived thread worker, so the UI never waits on
an ack; the answer comes back as a ControlDone message and is shown in the
status bar, the log and (for tune) the modal. Before anything is sent the
viewer checks it may steer (not read-only, connected, the run not ended) and
says why not when it may not.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from engine.run.control import requests as control
from engine.run.events import AutotuneChose, AutotuneStarted, Refused, SettingChanged
from tui.dashboard.messages import ControlDone
from tui.model.format import change_text
from tui.screens.autotune import AutotuneScreen
from tui.screens.confirm import AbortScreen
from tui.screens.tune import TuneScreen, tune_settings

#: Seconds a control may wait for its ack before it is reported as failed.
SEND_TIMEOUT = 10.0


def describe_request(request: control.Request) -> str:
    """How the status bar names a request: "set lr=0.001", "abort (graceful)", "checkpoint now"…"""
    if request.action == "set":
        return f"set {request.name}={request.value}" + (" (forced)" if request.force else "")
    if request.action == "abort":
        return f"abort ({request.mode})"
    if request.action == "autotune":
        return "autotune" if request.mode == "start" else f"autotune ({request.mode})"
    return request.action.replace("_", " ")


class Controls:
    """Sends the dashboard's controls for ``app`` (a DashboardApp) and shows their answers."""

    def __init__(self, app: Any) -> None:
        self.app = app

    @property
    def controllable(self) -> bool:
        """True when this viewer may steer the run now (connected, not read-only, the run not ended)."""
        return self.app.session is not None and not self.app.read_only and not self.app.model.ended

    def allowed(self, what: str) -> bool:
        """True if a control may be sent now; otherwise the status bar says why not."""
        app = self.app
        if app.read_only:
            app.say(f"{what}: read-only viewer — controls are disabled (attached with --read-only)", "warning")
            return False
        if app.session is None:
            app.say(f"{what}: not connected to the engine yet", "warning")
            return False
        if app.model.ended:
            app.say(f"{what}: the run has ended — nothing to control (q quits)", "warning")
            return False
        return True

    def send(self, requests: list[control.Request], label: str) -> None:
        """Send requests in order from a thread worker; each answer comes back as a ControlDone message."""
        if not requests:
            return
        self.app.say(f"{label}: sent, waiting for the engine…", "pending")
        self.app.run_worker(partial(self._send_blocking, list(requests)), thread=True, exit_on_error=False,
                            group="control", name=f"control: {label}")

    def ask_prediction(self, request: control.Request) -> None:
        """Send one dry-run request from a thread worker; the answer comes back as a ControlDone message."""
        self.app.run_worker(partial(self._send_blocking, [request]), thread=True, exit_on_error=False,
                            group="predict", name="predict")

    def _send_blocking(self, requests: list[control.Request]) -> None:
        for request in requests:
            session = self.app.session
            if session is None:
                self.app.post_message(ControlDone(request, None, "the session is closed"))
                continue
            try:
                ack = session.send(request, timeout=SEND_TIMEOUT)
            except Exception as exc:  # noqa: BLE001 - SessionError or a broken channel: shown, not raised
                self.app.post_message(ControlDone(request, None, str(exc).splitlines()[0] if str(exc) else
                                                  type(exc).__name__))
                continue
            self.app.post_message(ControlDone(request, ack))

    def done(self, message: ControlDone) -> None:
        """A control's answer: folded into the model and said; a prediction goes to the tune modal only."""
        app = self.app
        label = describe_request(message.request)
        ack = message.ack
        if message.request.dry_run:  # a tune-modal prediction: only the modal shows it
            if isinstance(app.screen, TuneScreen):
                app.safe(app.screen, app.screen.show_prediction, message.request, ack, message.error)
            return
        if ack is not None:
            app.model.ingest_ack(ack)
        if isinstance(ack, SettingChanged):
            app.say(f"{label}: done ({ack.name}: {change_text(ack.old, ack.new)})", "ok")
        elif isinstance(ack, Refused):
            app.say(f"{label}: refused — {ack.why}", "refused")
        elif isinstance(ack, (AutotuneStarted, AutotuneChose)):
            app.say(f"{label}: {app.model.autotune.headline()}", "ok")
        else:
            app.say(f"{label}: failed — {message.error or 'no answer'}", "error")
            app.model.note("error", f"{label}: failed — {message.error or 'no answer'}")
        app.sync_footer()
        if isinstance(app.screen, TuneScreen):
            app.safe(app.screen, app.screen.show_result, message.request, ack, message.error)
        app.lifecycle.check_ended()

    def toggle_pause(self) -> None:
        """Pause, or resume when paused."""
        if not self.allowed("pause/resume"):
            return
        request = control.resume() if self.app.model.state == "paused" else control.pause()
        self.send([request], request.action)

    def checkpoint(self) -> None:
        """Checkpoint at the next step boundary."""
        if self.allowed("checkpoint"):
            self.send([control.checkpoint_now()], "checkpoint")

    def abort(self) -> None:
        """The abort modal (g graceful, n now, escape cancel)."""
        if not self.allowed("abort"):
            return
        model = self.app.model
        last = model.checkpoints[-1].path if model.checkpoints else None
        self.app.push_screen(AbortScreen(self.app.run_name(), model.step, last), self._abort_chosen)

    def _abort_chosen(self, choice: str | None) -> None:
        if choice is None:
            self.app.say("abort cancelled", "info")
            return
        self.abort_with(choice)

    def abort_with(self, mode: str) -> None:
        """Send abort(mode); the app exits (printing the summary) once the engine has stopped."""
        if not self.allowed(f"abort ({mode})"):
            return
        self.app.lifecycle.exit_when_ended = True
        self.send([control.abort(mode)], f"abort ({mode})")
        self.app.say(f"abort ({mode}) sent: the dashboard closes when the engine has stopped", "pending")

    def tune(self) -> None:
        """The tune modal. A read-only viewer gets it too: it may ask for predictions, not apply."""
        app, model = self.app, self.app.model
        if app.session is None:
            app.say("tune: not connected to the engine yet", "warning")
            return
        settings = tune_settings(model.capabilities.settings)
        current = {s.name: model.setting(s.name) for s in settings}
        unavailable = "the run has ended: the engine cannot predict a change" if model.ended else \
            model.capabilities.settings_locked  # another framework's loop: it says why nothing may change
        app.push_screen(TuneScreen(current, settings, model.budget_bytes(),
                                   None if unavailable else self.ask_prediction,
                                   None if app.read_only or model.ended else self.send,
                                   unavailable=unavailable))

    def autotune(self) -> None:
        """The autotune key: start a search (none running, and this viewer may steer) and show its table; a
        viewer that may not steer sees the table of the search running or the last one."""
        app, model = self.app, self.app.model
        if app.session is None:
            app.say("autotune: not connected to the engine yet", "warning")
            return
        if model.capabilities.settings_locked:
            app.say(f"autotune: {model.capabilities.settings_locked}", "warning")
            return
        if not model.autotune.active and self.controllable:
            self.send([control.autotune()], "autotune")
        app.push_screen(AutotuneScreen(model, self.cancel_autotune if self.controllable else None))

    def cancel_autotune(self) -> None:
        """Stop the search; the engine restores the settings in force before it."""
        if self.allowed("autotune (cancel)"):
            self.send([control.autotune("cancel")], "autotune (cancel)")

    def explain(self, what: str) -> None:
        """A control key hidden from the footer: while no control may be sent, say why it does nothing; abort,
        left out of a narrow footer (Ctrl-C is there), opens as always.

        Tune still opens: a read-only viewer may ask for predictions, and an ended run's modal says why none come.
        """
        if what == "tune" and self.app.session is not None:
            self.tune()
            return
        if what == "autotune" and self.app.session is not None:
            self.autotune()  # the table of the last search, without starting one
            return
        if self.allowed(what) and what == "abort":  # shown only where the footer has room: the key still works
            self.abort()
