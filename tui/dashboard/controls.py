"""The dashboard's controls: pause / resume, checkpoint, abort, and opening the tune and autotune screens.

Every control reaches the engine through one ``ControlLink``: a blocking
send, made on a thread worker so the UI never waits on an ack. Whoever sends
(the app for its keys, the tune and autotune screens for theirs, from workers
they own) gets the answer back from the call, and the link also posts the
answer to a real request to the app as a ControlDone message: the app folds
every applied or refused control into the model, the status bar and the log,
whichever screen asked and whether or not it is still open. A dry run (the
tune modal's prediction) changes nothing, so only its asker sees it.

Before anything is sent the viewer checks it may steer (not read-only,
connected, the run not ended: ``Watch.why_not``) and says why not when it
may not.
"""

from __future__ import annotations

from typing import Callable

from engine.run.control import requests as control
from engine.run.control.session import Session, SessionError
from engine.run.events import AutotuneChose, AutotuneStarted, Event, Refused, SettingChanged
from tui.dashboard.messages import ControlDone
from tui.dashboard.watch import Watch
from tui.model.format import change_text, one_line
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


class ControlLink:
    """``link(request)``: send one request through the session and return the engine's ack (blocking: call it
    from a thread worker); raises SessionError with one line when there is no answer.

    The answer to a real request (not a dry run) is also posted to the app as a ControlDone, so the app
    records it whoever sent it. ``session()`` is the open session or None; ``post`` is ``App.post_message``
    (safe from any thread).
    """

    def __init__(self, session: Callable[[], Session | None], post: Callable[[ControlDone], bool]) -> None:
        self.session, self.post = session, post

    def __call__(self, request: control.Request) -> Event:
        report = not request.dry_run
        session = self.session()
        try:
            if session is None:
                raise SessionError("the session is closed")
            ack = session.send(request, timeout=SEND_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - SessionError or a broken channel: one line, never a traceback
            error = one_line(exc)
            if report:
                self.post(ControlDone(request, None, error))
            raise SessionError(error) from exc
        if report:
            self.post(ControlDone(request, ack))
        return ack


class Controls:
    """The control keys of one dashboard: what they send and open, and how their answers are said.

    ``watch`` is what the dashboard watches; ``link`` sends one request (ControlLink); ``say`` puts a line in
    the status bar; ``push_screen`` opens a modal (Textual's, with its result callback); ``send_in_background``
    sends a list of requests in order from a thread worker the app owns.
    """

    def __init__(self, watch: Watch, link: ControlLink, *, say: Callable[..., None], push_screen: Callable,
                 send_in_background: Callable[[list[control.Request]], object]) -> None:
        self.watch, self.link, self.say = watch, link, say
        self.push_screen, self.send_in_background = push_screen, send_in_background

    def allowed(self, what: str) -> bool:
        """True if a control may be sent now; otherwise the status bar says why not."""
        why = self.watch.why_not(what)
        if why:
            self.say(why, "warning")
        return why is None

    def send(self, requests: list[control.Request], label: str) -> None:
        """Send requests in order from a thread worker; each answer comes back as a ControlDone message."""
        if requests:
            self.say(f"{label}: sent, waiting for the engine…", "pending")
            self.send_in_background(list(requests))

    def answered(self, message: ControlDone) -> None:
        """A real control's answer (ControlLink posts no dry run): folded into the model, said and logged."""
        model = self.watch.model
        label = describe_request(message.request)
        ack = message.ack
        if ack is not None:
            model.ingest_ack(ack)
        if isinstance(ack, SettingChanged):
            self.say(f"{label}: done ({ack.name}: {change_text(ack.old, ack.new)})", "ok")
        elif isinstance(ack, Refused):
            self.say(f"{label}: refused — {ack.why}", "refused")
        elif isinstance(ack, (AutotuneStarted, AutotuneChose)):
            self.say(f"{label}: {model.autotune.headline()}", "ok")
        else:
            self.say(f"{label}: failed — {message.error or 'no answer'}", "error")
            model.note("error", f"{label}: failed — {message.error or 'no answer'}")

    def toggle_pause(self) -> None:
        """Pause, or resume when paused."""
        if not self.allowed("pause/resume"):
            return
        request = control.resume() if self.watch.model.state == "paused" else control.pause()
        self.send([request], request.action)

    def checkpoint(self) -> None:
        """Checkpoint at the next step boundary."""
        if self.allowed("checkpoint"):
            self.send([control.checkpoint_now()], "checkpoint")

    def abort(self) -> None:
        """The abort modal (g graceful, n now, escape cancel)."""
        if not self.allowed("abort"):
            return
        model = self.watch.model
        last = model.checkpoints[-1].path if model.checkpoints else None
        self.push_screen(AbortScreen(self.watch.run_name(), model.step, last), self._abort_chosen)

    def _abort_chosen(self, choice: str | None) -> None:
        if choice is None:
            self.say("abort cancelled", "info")
            return
        self.abort_with(choice)

    def abort_with(self, mode: str) -> None:
        """Send abort(mode); the app exits (printing the summary) once the engine has stopped."""
        if not self.allowed(f"abort ({mode})"):
            return
        self.watch.exit_when_ended = True
        self.send([control.abort(mode)], f"abort ({mode})")
        self.say(f"abort ({mode}) sent: the dashboard closes when the engine has stopped", "pending")

    def tune(self) -> None:
        """The tune modal. A read-only viewer gets it too: it may ask for predictions, not apply."""
        watch, model = self.watch, self.watch.model
        if watch.session is None:
            self.say("tune: not connected to the engine yet", "warning")
            return
        settings = tune_settings(model.capabilities)
        current = {s.name: model.setting(s.name) for s in settings}
        unavailable = "the run has ended: the engine cannot predict a change" if model.ended else \
            model.capabilities.settings_locked  # another framework's loop: it says why nothing may change
        self.push_screen(TuneScreen(current, settings, model.budget_bytes(), None if unavailable else self.link,
                                    may_apply=not (watch.read_only or model.ended), unavailable=unavailable))

    def autotune(self) -> None:
        """The autotune key: show the search's table, starting a search (none running, and this viewer may steer)
        from the table's own worker; a viewer that may not steer sees the table of the search running or the
        last one."""
        watch, model = self.watch, self.watch.model
        if watch.session is None:
            self.say("autotune: not connected to the engine yet", "warning")
            return
        if model.capabilities.settings_locked:
            self.say(f"autotune: {model.capabilities.settings_locked}", "warning")
            return
        steer = watch.controllable
        self.push_screen(AutotuneScreen(model, self.link if steer else None,
                                        start=steer and not model.autotune.active))

    def explain(self, what: str) -> None:
        """A control key hidden from the footer: while no control may be sent, say why it does nothing; abort,
        left out of a narrow footer (Ctrl-C is there), opens as always.

        Tune still opens: a read-only viewer may ask for predictions, and an ended run's modal says why none come.
        """
        if what == "tune" and self.watch.session is not None:
            self.tune()
            return
        if what == "autotune" and self.watch.session is not None:
            self.autotune()  # the table of the last search, without starting one
            return
        if self.allowed(what) and what == "abort":  # shown only where the footer has room: the key still works
            self.abort()
