"""The tune modal: change the running job's live settings, judged by the engine's own memory prediction.

The fields are the run's live table's (engine.core.live_table: the engine's
``batch_size``, ``grad_accum`` and ``lr``, then whatever the task declares in
``RunStarted.capabilities['settings']``: numbers as inputs bounded by
min/max, choices as selects), so this screen names no setting itself. A
field's value is pre-checked with its entry's own check (``Setting.check``,
the one the engine's door runs), for a message before anything is sent. As
values change it asks the engine a dry-run ``set`` per changed value and,
when two or more changed, one for all of them together (the pair being
applied: a batch that fits only with the leaner kernel), and shows the
answers: fits / won't fit, predicted bytes against the budget, and the
refusal the real request would get. Apply sends the changes as one request
(``together``), judged by the same budget call as the combined dry run, so
the advice cannot disagree with the refusal. Asking waits ``DEBOUNCE_S``
after the last keystroke (typing "256" asks once, not three times) and
answers are cached per (setting, value) and per combination.

When the engine cannot answer (the run ended, an engine that predates dry
runs, a broken channel) the modal says so; it never guesses. A read-only
viewer may ask (a dry run changes nothing) but cannot apply.
"""

from __future__ import annotations

from typing import Any

from textual import on, work
from textual.binding import Binding
from textual.containers import Grid, Vertical
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import Checkbox, Input, Label, Select, Static

from engine.core.live_table import ENGINE, LiveTable
from engine.core.taskspec import Capabilities, Setting
from engine.run.control.requests import Request, RequestError, set_value
from engine.run.events import Prediction, Refused, SettingChanged
from tui.model.format import change_text, human_bytes, short_float, value_text
from tui.screens.answers import Answered, Link, ask
from tui.widgets.fields import KeysInOrder, OrderedInput

#: Seconds of quiet after an edit before the engine is asked (one request per settled value, not per key).
DEBOUNCE_S = 0.3


#: The first element of the answers key of a combined dry run.
TOGETHER = "together"


def together_key(changes: dict[str, Any]) -> tuple:
    """The answers key of every change at once."""
    return (TOGETHER, tuple(changes.items()))


def asked_keys(changes: dict[str, Any]) -> list[tuple]:
    """Each change alone, then (two or more) all of them together: the dry runs the modal wants answered."""
    keys = list(changes.items())
    return keys + ([together_key(changes)] if len(changes) > 1 else [])


class ForceBox(KeysInOrder, Checkbox, inherit_bindings=False):
    """The force checkbox: space (or a click) ticks it; enter applies the form, as in every other field
    (Checkbox's own enter binding toggled it, so enter un-ticked the force it was meant to send). Its keys act in
    the order typed (tui.widgets.fields), like the number fields'."""

    BINDINGS = [Binding("space", "toggle_button", "toggle", show=False)]


def tune_settings(capabilities: Capabilities, engine: LiveTable = ENGINE) -> tuple[Setting, ...]:
    """The modal's fields: the run's live table's (engine.core.live_table: the engine's own the modal lists, then
    the task's declared ones; a task re-declaring an engine name is ignored)."""
    return engine.for_task(capabilities).tune_modal()


class TuneScreen(ModalScreen[None]):
    """Edit live settings with the engine's prediction of each change; enter applies, escape closes.

    ``link(request)`` sends one request to the engine and returns its ack (blocking: the screen calls it from
    its own thread workers, and the answer comes back to it as an ``Answered`` message); None means the engine
    cannot be asked, and ``unavailable`` says why. ``may_apply`` is False for a viewer that may only ask
    (read-only): dry runs change nothing.
    """

    BINDINGS = [Binding("escape", "close", "close"), Binding("ctrl+s", "apply", "apply"),
                Binding("enter", "apply", "apply", show=False),
                # Tab moves the focus the moment it is read, so the keys typed after it in one burst go to the next
                # field (as a screen binding it would run after they reached this one: tui.widgets.fields).
                Binding("tab", "app.focus_next", show=False, priority=True),
                Binding("shift+tab", "app.focus_previous", show=False, priority=True)]


    def __init__(self, current: dict[str, Any], settings: tuple[Setting, ...], budget: int | None,
                 link: Link | None, *, may_apply: bool, unavailable: str = "") -> None:
        super().__init__()
        self.current = dict(current)
        self.settings = tuple(settings)
        self.budget = budget
        self.link = link
        self.may_apply = may_apply and link is not None
        self.unavailable = unavailable
        #: (name, value) → the engine's answer: a Prediction, or the one line saying why there is none.
        self.answers: dict[tuple[str, Any], Prediction | str] = {}
        #: Dry-run request id → (name, value) awaiting an answer.
        self.asked: dict[str, tuple[str, Any]] = {}
        #: Request id → (setting, value) for real requests sent from this screen.
        self.pending: dict[str, tuple[str, Any]] = {}
        #: One line per answered request (tests assert on it).
        self.results: list[str] = []
        #: Request id → the "sent: …" line shown until its answer comes.
        self.sent: dict[str, str] = {}
        #: What the last apply said about the form as it was (fix first, nothing changed): shown until the form
        #: changes, so a fixed value never leaves its old error behind.
        self.note = ""
        #: The form as it was when ``note`` was said (its fields' raw values).
        self._noted: tuple = ()
        self._shown: dict[str, str] = {}
        self._timer = None

    def compose(self):
        with Vertical(classes="dialog wide", id="tune-dialog"):
            yield Static("[b]Tune the running job[/b]", classes="dialog-title")
            with Grid(id="tune-fields"):
                for setting in self.settings:
                    bounds = "" if setting.kind == "choice" else f" [$text-muted]{setting.range_text()}[/]"
                    yield Label(escape(setting.label or setting.name) + bounds, id=f"tune-label-{setting.name}")
                    yield self._field(setting)
            if self.may_apply:
                yield ForceBox("force: skip the engine's budget check", id="tune-force")
            yield Static("", id="tune-estimate")
            yield Static("", id="tune-results")
            hint = "enter apply · esc close · tab next field" if self.may_apply else \
                "read-only viewer: predictions only, nothing can be applied · esc close"
            yield Static(f"[$text-muted]{hint}[/]", classes="dialog-hint")

    def _field(self, setting: Setting):
        value = self.current.get(setting.name)
        if setting.kind == "choice":
            options = [(value_text(c), c) for c in setting.choices]  # a flag reads on / off, not False / True
            start = value if value in setting.choices else (setting.choices[0] if setting.choices else Select.BLANK)
            return Select(options, value=start, allow_blank=not setting.choices, id=f"tune-{setting.name}",
                          compact=True, tooltip=setting.help or None)
        text = "" if value is None else (short_float(value, 6) if setting.kind == "float" else str(value))
        return OrderedInput(text, id=f"tune-{setting.name}", type="integer" if setting.kind == "int" else "number",
                            compact=True, tooltip=setting.help or None)

    def on_mount(self) -> None:
        self._shown = {s.name: self._raw(s) for s in self.settings if s.kind != "choice"}
        self.refresh_estimate()

    # ------------------------------------------------------------ values
    def _raw(self, setting: Setting) -> str:
        return self.query_one(f"#tune-{setting.name}", Input).value.strip()

    def values(self) -> tuple[dict[str, Any], list[str]]:
        """The form's values (parsed and checked against each setting's bounds) and one error line per bad field."""
        out: dict[str, Any] = {}
        errors: list[str] = []
        for setting in self.settings:
            if setting.kind == "choice":
                value = self.query_one(f"#tune-{setting.name}", Select).value
                if value is not Select.BLANK:
                    out[setting.name] = value
                continue
            raw = self._raw(setting)
            if not raw:
                continue
            try:
                value = int(raw) if setting.kind == "int" else float(raw)
            except ValueError:
                errors.append(f"{setting.name}: {raw!r} is not a "
                              f"{'whole number' if setting.kind == 'int' else 'number'}")
                continue
            why = setting.check(value)
            if why:
                errors.append(why)
                continue
            out[setting.name] = value
        return out, errors

    def changes(self) -> dict[str, Any]:
        """Settings the user edited to a value different from the running job's.

        A text field still showing what the screen first showed is not a
        change: the LR is shown rounded, and re-sending it would reset it.
        """
        values, _ = self.values()
        return {k: v for k, v in values.items()
                if (k not in self._shown or self._raw_named(k) != self._shown[k]) and v != self.current.get(k)}

    def _raw_named(self, name: str) -> str:
        return self.query_one(f"#tune-{name}", Input).value.strip()

    # ---------------------------------------------------------- prediction
    def refresh_estimate(self) -> None:
        """Show the engine's answer for each change; ask (debounced) for the ones not yet answered."""
        if not self.is_attached:  # an answer or a timer that outlived the modal
            return
        _, errors = self.values()
        line = self.query_one("#tune-estimate", Static)
        if errors:
            line.update("[$error]" + escape("; ".join(errors)) + "[/]")
            return
        changes = self.changes()
        if not changes:
            line.update(f"[$text-muted]no change yet · budget {human_bytes(self.budget)}"
                        + (f" · {escape(self.unavailable)}" if self.unavailable else "") + "[/]")
            return
        verdicts = [self._verdict(name, value) for name, value in changes.items()]
        if len(changes) > 1:  # what apply will be judged by: every change at once
            verdicts.insert(0, self._verdict("together", ", ".join(f"{n}={value_text(v)}" for n, v in changes.items()),
                                             key=together_key(changes)))
        line.update("\n".join(verdicts))
        if self.link is not None and any(k not in self.answers for k in asked_keys(changes)):
            if self._timer is not None:
                self._timer.stop()
            self._timer = self.set_timer(DEBOUNCE_S, self._ask_engine)

    def _ask_engine(self) -> None:
        self._timer = None
        if not self.is_attached:
            return
        waiting = set(self.asked.values())
        changes = self.changes()
        for key in asked_keys(changes):
            if key in self.answers or key in waiting or self.link is None:
                continue
            (name, value), *others = key[1] if key[0] == TOGETHER else (key,)
            try:
                request = set_value(name, value, dry_run=True, together=dict(others) or None)
            except RequestError as exc:
                self.answers[key] = str(exc)
                continue
            self.asked[request.id] = key
            self._send(request)
        self.refresh_estimate()

    def _verdict(self, name: str, value: Any, key: tuple | None = None) -> str:
        head = f"{escape(name)} ({escape(value)}): " if key else f"{escape(name)} → {escape(value_text(value))}: "
        answer = self.answers.get(key or (name, value))
        if answer is None:
            why = self.unavailable if self.link is None else "asking the engine…"
            return f"[$text-muted]{head}{escape(why or 'the engine cannot be asked')}[/]"
        if isinstance(answer, str):
            return f"[$text-muted]{head}no prediction — {escape(answer)}[/]"
        if answer.predicted is None:
            verdict = "fits" if answer.fits else "won't fit"
            text = f"{verdict} (no memory prediction for this change)"
            return f"[{'$success' if answer.fits else '$error'}]{head}{escape(text)}[/]" + \
                (f"\n  [$text-muted]{escape(answer.refused)}[/]" if answer.refused else "")
        share = f" ({100 * answer.predicted / answer.budget:.0f} %)" if answer.budget else ""
        color, verdict = ("$success", "fits") if answer.fits else ("$error", "won't fit")
        text = (f"{head}[{color}][b]{verdict}[/b][/] — predicted peak {human_bytes(answer.predicted)} "
                f"({answer.predicted} B) of budget {human_bytes(answer.budget)}{share}")
        return text + (f"\n  [$text-muted]{escape(answer.refused)}[/]" if answer.refused else "")

    # ------------------------------------------------------------- the engine
    @work(thread=True, exit_on_error=False, group="tune")
    def _send(self, request: Request) -> None:
        """Send ``request`` on this worker's thread (the UI never waits on the engine); the answer comes back to
        this screen as Answered. A real request's answer also reaches the app (the link posts it), so it is
        recorded even when this modal was closed meanwhile."""
        self.post_message(ask(self.link, request))

    @on(Answered)
    def _answered(self, message: Answered) -> None:
        if message.request.dry_run:
            self.show_prediction(message.request, message.ack, message.error)
        else:
            self.show_result(message.request, message.ack, message.error)

    def show_prediction(self, request: Request, answer, error: str | None) -> None:
        """The engine's answer to a dry run sent from here (a Prediction), or why there is none."""
        key = self.asked.pop(request.id, None)
        if key is None:
            return
        if isinstance(answer, Prediction):
            self.answers[key] = answer
        elif answer is not None:  # an engine that ignores dry_run answered as if it were real
            self.answers[key] = f"this engine does not answer dry runs (it sent {answer.type})"
        else:
            self.answers[key] = error or "no answer"
        self.refresh_estimate()

    def on_input_changed(self, event: Input.Changed) -> None:
        self._form_changed()

    def on_select_changed(self, event: Select.Changed) -> None:
        self._form_changed()

    def _form_changed(self) -> None:
        # Against the form the note was about, not on every Changed: a field's Changed reaches the screen after
        # an enter typed right behind the last digit has applied (tui.widgets.fields), and must not clear the
        # note that apply just said about that very value.
        if self.note and self._form() != self._noted:
            self._show_results("")
        self.refresh_estimate()

    def _form(self) -> tuple:
        """Every field's raw value now."""
        return tuple(self.query_one(f"#tune-{s.name}", Select if s.kind == "choice" else Input).value
                     for s in self.settings)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_apply()

    # ------------------------------------------------------------- apply
    def action_apply(self) -> None:
        """Send one set request per changed, valid value (in field order); acks arrive via ``show_result``."""
        if not self.may_apply:
            self._show_results("[$warning]read-only viewer: nothing can be applied (attach without --read-only)[/]")
            return
        _, errors = self.values()
        if errors:
            self._show_results("[$error]fix first: " + escape("; ".join(errors)) + "[/]")
            return
        changes = self.changes()
        if not changes:
            self._show_results("[$text-muted]nothing changed[/]")
            return
        force = self.query_one("#tune-force", Checkbox).value
        (name, value), *others = changes.items()
        try:  # one request: the changes are judged as one and applied together
            request = set_value(name, value, force=force, together=dict(others) or None)
        except RequestError as exc:
            self._show_results(f"[$error]{escape(str(exc))}[/]")
            return
        self.pending[request.id] = changes
        self.sent[request.id] = ("[$accent]sent: " + escape(", ".join(f"{n}={value_text(v)}"
                                                                        for n, v in changes.items()))
                                 + (" (forced)" if force else "") + "…[/]")
        self._show_results("")
        self._send(request)

    def _show_results(self, note: str) -> None:
        """The answers so far (the newest four), the requests still waiting for theirs, and ``note``."""
        self.note, self._noted = note, self._form()
        lines = self.results[-4:] + list(self.sent.values()) + ([note] if note else [])
        self.query_one("#tune-results", Static).update("\n".join(lines))

    def show_result(self, request: Request, ack, error: str | None) -> None:
        """An answer for a request sent from here: applied, refused (with why) or failed."""
        if request.id not in self.pending:
            return
        changes = self.pending.pop(request.id)
        self.sent.pop(request.id, None)
        what = ", ".join(f"{n} → {value_text(v)}" for n, v in changes.items())
        if isinstance(ack, SettingChanged):
            self.current.update(changes)
            forced = " (forced)" if (ack.reason or "").startswith("forced") else ""
            shown = change_text(ack.old, ack.new) if len(changes) == 1 else what
            line = f"[$success]{escape(ack.name if len(changes) == 1 else 'together')} {escape(shown)}: " \
                   f"applied{forced}[/]"
            self.answers.clear()  # every other prediction was made against the old value
        elif isinstance(ack, Refused):
            judged = f" (predicted peak {ack.predicted} B of budget {ack.budget} B)" if ack.predicted else ""
            line = f"[$error]{escape(what)}: refused — {escape(ack.why)}{judged}[/]"
        else:
            line = f"[$error]{escape(what)}: failed — {escape(error or 'no answer')}[/]"
        self.results.append(line)
        self._show_results(self.note)
        self.refresh_estimate()

    def action_close(self) -> None:
        """Close the modal (requests already sent still get their acks in the log)."""
        self.dismiss(None)
