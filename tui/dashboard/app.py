"""The dashboard app: one Session owned by a worker thread, panels redrawn at the UI's own pace.

Threads: the session worker (tui.dashboard.pump.SessionPump) opens the session, so
torch — if the session needs it — is imported after the first frame; it
polls, batches ~80 ms of events into one message, and posts it. Controls are
sent from short-lived thread workers so the UI never blocks on an ack. Only
``post_message`` crosses threads (``call_from_thread`` blocks the caller and
raises after shutdown). Widgets read a ``RunModel`` on the UI thread: text at
≤ 4 Hz, plots at ≤ 2 Hz (``refresh``), each only when its data moved.

Exits: ``app.return_code`` is the run's exit code when it ended (RunFinished),
0 after a detach, 1 when no session could be opened; ``app.summary`` is the
line to print after the terminal is restored.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from functools import partial
from typing import Callable

from textual.app import App
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.worker import get_current_worker

import themes
from engine.run.control import requests as control
from engine.run.control.session import Session
from engine.run.events import Refused, SettingChanged
from tui.dashboard.messages import (
    CompareLoaded,
    ControlDone,
    EventBatch,
    HistoryFolded,
    LivenessChanged,
    SessionFailed,
    SessionReady,
)
from tui.dashboard.palette import DashboardCommands
from tui.dashboard.pump import BATCH_S, SessionPump
from tui.model.dashboard import RunModel
from tui.model.history_fold import deferred_fold
from tui.screens.confirm import AbortScreen, QuitScreen
from tui.screens.dashboard import CONTROL_ACTIONS, DashboardScreen
from tui.screens.help import HelpScreen
from tui.screens.metric import MetricScreen
from tui.screens.tune import TuneScreen, tune_settings

#: Seconds a control may wait for its ack before it is reported as failed.
SEND_TIMEOUT = 10.0
#: Allowed plot refresh rates (Hz): above 2 Hz the UI costs training throughput (research, 4 Hz: −15-25 %).
MAX_REFRESH_HZ = 2.0
#: Text panels redraw at most this often (Hz).
MAX_TEXT_HZ = 4.0


def check_refresh(hz: float | None) -> float:
    """Plot redraws per second: None → 1; ValueError naming --refresh unless 0 < hz ≤ 2."""
    if hz is None:
        return 1.0
    if not (isinstance(hz, (int, float)) and 0 < hz <= MAX_REFRESH_HZ):
        raise ValueError(f"--refresh {hz!r}: plot redraws per second must be > 0 and <= {MAX_REFRESH_HZ:g}")
    return float(hz)


def _describe_request(request: control.Request) -> str:
    if request.action == "set":
        return f"set {request.name}={request.value}" + (" (forced)" if request.force else "")
    if request.action == "abort":
        return f"abort ({request.mode})"
    return request.action.replace("_", " ")


class DashboardApp(App[int]):
    """The training dashboard. ``session_factory`` is called on the worker thread and returns a Session."""

    CSS_PATH = themes.CSS_PATHS
    TITLE = "sensorlm-tui"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide"), (160, "-xwide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (34, "-tall"), (50, "-xtall")]
    COMMANDS = App.COMMANDS | {DashboardCommands}
    BINDINGS = [Binding("ctrl+q", "request_quit", "quit", show=False, priority=True),
                Binding("ctrl+c", "request_quit", "quit", show=False, priority=True)]

    def __init__(self, session_factory: Callable[[], Session],
                 theme: str | None = None, refresh: float | None = None, read_only: bool = False,
                 ansi: bool = False, capacity: int = 1 << 20, batch_s: float = BATCH_S,
                 in_process: bool = False, compare: str | None = None) -> None:
        theme_name = themes.resolve("ansi" if ansi else theme)
        plot_hz = check_refresh(refresh)
        super().__init__(ansi_color=True if ansi else None)
        themes.register(self)
        self.theme = theme_name
        #: Everything the panels show.
        self.model = RunModel(capacity)
        #: Seconds between plot / text redraws.
        self.plot_period = 1.0 / plot_hz
        # Text at the plot rate (1 Hz by default): a step counter needs no more, and bytes matter over SSH.
        self.text_period = max(1.0 / MAX_TEXT_HZ, min(1.0, self.plot_period))
        self.read_only = read_only
        #: The Trainer runs inside this process: quitting stops it, so there is no detach.
        self.in_process = in_process
        #: True when quitting may leave the engine running (process mode); set when the session opens.
        self.detachable = False
        self.run_dir: str | None = None
        #: The line to print after the app exits (how the run ended, checkpoint, resume / attach command).
        self.summary = ""
        #: True when ``summary`` is an error (print it to stderr).
        self.summary_is_error = False
        self._pump = SessionPump(session_factory, self.post_message, read_only=read_only, batch_s=batch_s,
                                 fold=self.history_fold)
        self._exit_when_ended = False
        self._said_ended = False
        self._failed_panels: set[str] = set()
        self._sighup = False
        self._quit_armed = False
        self._controls_shown: tuple | None = None
        #: A run directory to overlay once the app is up (``attach --compare``).
        self._compare_at_start = compare

    # ------------------------------------------------------------ lifecycle
    def get_default_screen(self) -> DashboardScreen:
        return DashboardScreen(id="dashboard")

    def on_mount(self) -> None:
        self.model.set_viewer(read_only=self.read_only)
        self.run_worker(self._pump_body, thread=True, exit_on_error=False, name="session", group="session")
        self.set_interval(self.text_period, self._tick_text, name="text")
        self.set_interval(self.plot_period, self._tick_plots, name="plots")
        self.theme_changed_signal.subscribe(self, lambda _theme: self.redraw(force=True))
        if self._compare_at_start:
            self.load_compare(self._compare_at_start)
        try:  # Textual installs no SIGHUP handler: without one an SSH drop kills us before any cleanup
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self._on_hangup)
            self._sighup = True
        except (NotImplementedError, RuntimeError, ValueError, AttributeError):
            pass  # not the main thread, or no SIGHUP on this platform

    def on_unmount(self) -> None:
        self._pump.stop.set()  # the worker closes the session after its current poll (≤ batch_s / 2)
        if self._sighup:
            try:
                asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
            except (RuntimeError, ValueError):
                pass
            self._sighup = False

    def _pump_body(self) -> None:
        worker = get_current_worker()
        self._pump.run(cancelled=lambda: worker.is_cancelled)

    @property
    def session(self) -> Session | None:
        """The open session (None before it opened and after it closed)."""
        return self._pump.session

    @property
    def session_closed(self) -> bool:
        """True once the worker has closed the session."""
        return self._pump.closed.is_set()

    def wait_closed(self, timeout: float) -> bool:
        """Block until the worker has closed the session (it does so after its current poll, ≤ batch_s / 2,
        plus whatever the session's own close costs); True if it did within ``timeout`` seconds.

        Textual returns from ``run`` without joining thread workers, so whoever prints the final summary
        waits here first: the line then describes a session that is really closed.
        """
        return self._pump.closed.wait(timeout)

    def _leave(self, code: int, summary: str, error: bool = False) -> None:
        self.summary, self.summary_is_error = summary, error
        self._pump.stop.set()
        self.exit(result=code, return_code=code)

    # ------------------------------------------------------------- drawing
    @property
    def dashboard(self) -> DashboardScreen:
        """The main screen, at the bottom of the stack (also while a modal is on top)."""
        return self.screen_stack[0]  # type: ignore[return-value]

    def _panels(self, kind: str) -> list:
        """The panels to feed; [] while the screen is not composed (start-up) or being torn down (exit)."""
        try:
            screen = self.dashboard
            if kind == "plots":
                return screen.charts
            return [screen.query_one(f"#{name}") for name in ("header", "progress", "memory", "system", "log")]
        except (IndexError, NoMatches, AttributeError):
            return []

    def _tick_text(self) -> None:
        if self.model.starting_up:  # the phase clock ticks while nothing else moves
            self.model.versions["charts"] += 1
            self.model.versions["progress"] += 1
        for panel in self._panels("text"):
            self._safe(panel, panel.update_from, self.model)
        self._sync_footer()

    def _sync_footer(self) -> None:
        """Refresh the footer's keys when what may be sent changed (paused ↔ running, ended, read-only)."""
        shown = (self.model.state == "paused", self._controllable())
        if shown != self._controls_shown:
            self._controls_shown = shown
            try:
                self.dashboard.refresh_bindings()
            except IndexError:
                pass

    def _controllable(self) -> bool:
        return not self.read_only and not self.model.ended

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """Footer and keys follow the state: pause xor resume; no control keys when read-only or ended."""
        if action in CONTROL_ACTIONS and not self._controllable():
            return False
        if action == "pause":
            return self.model.state != "paused"
        if action == "resume":
            return self.model.state == "paused"
        return True

    def get_system_commands(self, screen):
        """Textual's palette commands minus its theme picker: the dashboard's "theme: …" commands are the one
        theme system (Textual's own themes would bypass the dashboard's palettes and its ansi mode)."""
        for command in super().get_system_commands(screen):
            if command.title.lower() != "theme":
                yield command

    def _tick_plots(self) -> None:
        for panel in self._panels("plots"):
            self._safe(panel, panel.update_from, self.model)

    def redraw(self, force: bool = False) -> None:
        """Update every panel now (``force`` even if nothing changed: theme switch, tests)."""
        for panel in self._panels("text") + self._panels("plots"):
            self._safe(panel, panel.update_from, self.model, force)
        self._sync_footer()

    def _safe(self, panel, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - one broken panel must not end the session or the run
            self.report_widget_error(panel, exc)

    def report_widget_error(self, panel, exc: BaseException) -> None:
        """Show a panel's failure once (log + status line); the session and the engine keep going."""
        name = getattr(panel, "id", None) or type(panel).__name__
        if name in self._failed_panels:
            return
        self._failed_panels.add(name)
        text = f"panel {name} failed ({type(exc).__name__}: {exc}); the run continues"
        self.model.note("error", text)
        self.say(text, "error")

    def say(self, text: str, kind: str = "info") -> None:
        """Put a line in the status bar."""
        try:
            self.dashboard.query_one("#status").say(text, kind)
        except Exception:  # noqa: BLE001 - no status bar yet / any more
            pass

    @property
    def status_text(self) -> str:
        """What the status bar shows (tests read it)."""
        try:
            return self.dashboard.query_one("#status").message
        except Exception:  # noqa: BLE001
            return ""

    # ------------------------------------------------------------- messages
    def history_fold(self, history):
        """The session worker's fold of a long history (called on it): the first frame shows the newest steps,
        the worker folds the rest after that frame. None for a short one (folded here at once)."""
        return deferred_fold(history, self.model.capacity)

    def on_event_batch(self, message: EventBatch) -> None:
        try:
            if message.fold is not None:
                self.model.ingest_history(message.events, message.fold)
            else:
                self.model.ingest(message.events)
        except Exception as exc:  # noqa: BLE001 - a malformed event is reported, not fatal
            self.model.note("error", f"could not show an event batch ({type(exc).__name__}: {exc})")
        if message.history:
            self.redraw()
        if message.fold is not None:  # the worker folds the rest once this frame is on screen
            self.call_after_refresh(message.fold.shown.set)
        self._sync_footer()
        self._check_ended()

    def on_history_folded(self, message: HistoryFolded) -> None:
        if self.model.adopt(message.fold):
            self.redraw()

    def on_session_ready(self, message: SessionReady) -> None:
        self.read_only = message.read_only
        self.detachable = message.detachable and not self.in_process
        self.run_dir = message.run_dir
        self.model.set_viewer(connection="connected", read_only=message.read_only)
        self.say("read-only viewer: watching only" if message.read_only else "connected", "info")

    def on_session_failed(self, message: SessionFailed) -> None:
        if message.fatal:
            self.model.set_viewer(connection=f"failed: {message.error}")
            self._leave(1, f"sensorlm-tui: error: {message.error}", error=True)
            return
        self.model.note("error", message.error)
        self.say(message.error, "error")

    def on_liveness_changed(self, message: LivenessChanged) -> None:
        self.model.set_liveness(message.liveness)
        self._check_ended()

    def on_control_done(self, message: ControlDone) -> None:
        label = _describe_request(message.request)
        ack = message.ack
        if message.request.dry_run:  # a tune-modal prediction: only the modal shows it
            if isinstance(self.screen, TuneScreen):
                self._safe(self.screen, self.screen.show_prediction, message.request, ack, message.error)
            return
        if ack is not None:
            self.model.ingest_ack(ack)
        if isinstance(ack, SettingChanged):
            self.say(f"{label}: done ({ack.name}: {ack.old} → {ack.new})", "ok")
        elif isinstance(ack, Refused):
            self.say(f"{label}: refused — {ack.why}", "refused")
        else:
            self.say(f"{label}: failed — {message.error or 'no answer'}", "error")
            self.model.note("error", f"{label}: failed — {message.error or 'no answer'}")
        self._sync_footer()
        if isinstance(self.screen, TuneScreen):
            self._safe(self.screen, self.screen.show_result, message.request, ack, message.error)
        self._check_ended()

    def _check_ended(self) -> None:
        if not self.model.ended:
            self._said_ended = False  # a resumed run (a new generation) may end again and be said again
            return
        if self._exit_when_ended:
            fin = self.model.finished
            self._leave(fin.exit_code if fin else 0, self.model.summary())
        elif not self._said_ended:
            self._said_ended = True
            self.redraw()  # the final state on every panel now, with the line that says it ended
            self.say(f"{self.model.summary()} — q quits", "info")

    # ------------------------------------------------------------- controls
    def control_allowed(self, what: str) -> bool:
        """True if a control may be sent now; otherwise the status bar says why not."""
        if self.read_only:
            self.say(f"{what}: read-only viewer — controls are disabled (attached with --read-only)", "warning")
            return False
        if self._pump.session is None:
            self.say(f"{what}: not connected to the engine yet", "warning")
            return False
        if self.model.ended:
            self.say(f"{what}: the run has ended — nothing to control (q quits)", "warning")
            return False
        return True

    def send_controls(self, requests: list[control.Request], label: str) -> None:
        """Send requests in order from a thread worker; each answer comes back as a ControlDone message."""
        if not requests:
            return
        self.say(f"{label}: sent, waiting for the engine…", "pending")
        self.run_worker(partial(self._send_blocking, list(requests)), thread=True, exit_on_error=False,
                        group="control", name=f"control: {label}")

    def _send_blocking(self, requests: list[control.Request]) -> None:
        for request in requests:
            session = self._pump.session
            if session is None:
                self.post_message(ControlDone(request, None, "the session is closed"))
                continue
            try:
                ack = session.send(request, timeout=SEND_TIMEOUT)
            except Exception as exc:  # noqa: BLE001 - SessionError or a broken channel: shown, not raised
                self.post_message(ControlDone(request, None, str(exc).splitlines()[0] if str(exc) else
                                              type(exc).__name__))
                continue
            self.post_message(ControlDone(request, ack))

    def action_explain(self, what: str) -> None:
        """A control key while no control may be sent (hidden from the footer): say why it does nothing.

        Tune still opens: a read-only viewer may ask for predictions, and an ended run's modal says why none come.
        """
        if what == "tune" and self._pump.session is not None:
            self.action_tune()
            return
        self.control_allowed(what)

    def action_pause(self) -> None:
        """space while running: pause."""
        self.action_toggle_pause()

    def action_resume(self) -> None:
        """space while paused: resume."""
        self.action_toggle_pause()

    def action_toggle_pause(self) -> None:
        """space: pause, or resume when paused."""
        if not self.control_allowed("pause/resume"):
            return
        request = control.resume() if self.model.state == "paused" else control.pause()
        self.send_controls([request], request.action)

    def action_checkpoint(self) -> None:
        """c: checkpoint now."""
        if self.control_allowed("checkpoint"):
            self.send_controls([control.checkpoint_now()], "checkpoint")

    def action_abort(self) -> None:
        """a: the abort modal (g graceful, n now, escape cancel)."""
        if not self.control_allowed("abort"):
            return
        last = self.model.checkpoints[-1].path if self.model.checkpoints else None
        self.push_screen(AbortScreen(self._run_name(), self.model.step, last), self._abort_chosen)

    def _abort_chosen(self, choice: str | None) -> None:
        if choice is None:
            self.say("abort cancelled", "info")
            return
        self.abort_with(choice)

    def abort_with(self, mode: str) -> None:
        """Send abort(mode); the app exits (printing the summary) once the engine has stopped."""
        if not self.control_allowed(f"abort ({mode})"):
            return
        self._exit_when_ended = True
        self.send_controls([control.abort(mode)], f"abort ({mode})")
        self.say(f"abort ({mode}) sent: the dashboard closes when the engine has stopped", "pending")

    def action_request_quit(self) -> None:
        """q: quit; while training, ask: abort gracefully / now, detach (process mode), or stay."""
        if isinstance(self.screen, QuitScreen):
            return
        if self._pump.session is None and not self._pump.closed.is_set() and not self._quit_armed:
            # Still connecting: the engine may be starting and would be left running unseen.
            self._quit_armed = True
            self.say("still connecting to the engine — q again quits anyway (a starting engine keeps running; "
                     "see sensorlm-tui runs)", "warning")
            return
        if self.model.ended or self._pump.session is None:
            fin = self.model.finished
            code = fin.exit_code if fin else (1 if self.model.connection.startswith("failed") else 0)
            self._leave(code, self.model.summary() if self.model.started else "")
            return
        if self.read_only:
            self.detach()
            return
        self.push_screen(QuitScreen(self._run_name(), self.model.step, self.detachable, self.run_dir),
                         self._quit_chosen)

    def _quit_chosen(self, choice: str | None) -> None:
        if choice is None:
            self.say("still watching", "info")
        elif choice == "detach":
            self.detach()
        else:
            self.abort_with(choice)

    def detach(self, reason: str = "") -> None:
        """Close the dashboard and leave the engine running; the summary says how to re-attach.

        Without a detachable engine (in-process: the Trainer lives in this
        process) closing stops the run; the summary says so and how to resume.
        """
        why = f" ({reason})" if reason else ""
        if not self.detachable and not self.read_only:
            resume = f" · resume: sensorlm-tui train --resume {self.run_dir}" if self.run_dir else ""
            self._leave(0, f"{self._run_name()}: dashboard closed{why} at step {self.model.step}; the in-process "
                           f"run stops with it{resume}")
            return
        where = self.run_dir or "<run_dir>"
        self._leave(0, f"detached from {self._run_name()} at step {self.model.step}{why}; the engine keeps "
                       f"running. Re-attach: sensorlm-tui attach {where}")

    def _exit_after_hangup(self, code: int, session=None) -> None:
        """Make sure this process ends after a hang-up, even if Textual's shutdown does not.

        Measured: a hang-up during start-up left the viewer blocked for good in Textual's shutdown, writing
        escape codes into the writer queue of a terminal that no longer exists. A daemon watchdog ends the
        process 5 s after the normal exit was asked for (after an in-process trainer has checkpointed and
        stopped); when the normal exit works, the process is gone first and the watchdog with it.
        """
        if self.is_headless:  # under App.run_test (tests): never end the test runner's process
            return

        def watchdog() -> None:
            if session is not None:
                session.wait(300)  # the in-process trainer checkpoints before we may go
            time.sleep(5.0)
            os._exit(code)

        threading.Thread(target=watchdog, name="hangup-watchdog", daemon=True).start()

    def _on_hangup(self) -> None:
        # The terminal is gone: nothing can be drawn or asked; detach (a process-mode engine keeps training).
        if self.detachable or self._pump.session is None:
            self.detach("terminal hung up")
            self._exit_after_hangup(0)
            return
        # In-process the trainer dies with this process: ask it to checkpoint and stop, with the reason the run's
        # log will carry; the session worker then waits for it when it closes the session (InProcessSession.close).
        reason = "terminal hung up (SIGHUP): checkpointed and stopped (in-process mode)"
        self._pump.session.stop(timeout=0, reason=reason)
        self._leave(130, f"{self._run_name()}: {reason}")
        self._exit_after_hangup(130, self._pump.session)

    def action_tune(self) -> None:
        """t: the tune modal. A read-only viewer gets it too: it may ask for predictions, not apply."""
        if self._pump.session is None:
            self.say("tune: not connected to the engine yet", "warning")
            return
        settings = tune_settings(self.model.capabilities.settings)
        current = {s.name: self.model.setting(s.name) for s in settings}
        unavailable = "the run has ended: the engine cannot predict a change" if self.model.ended else ""
        self.push_screen(TuneScreen(current, settings, self.model.budget_bytes(),
                                    None if unavailable else self.ask_prediction,
                                    None if self.read_only or self.model.ended else self.send_controls,
                                    unavailable=unavailable))

    def ask_prediction(self, request: control.Request) -> None:
        """Send one dry-run request from a thread worker; the answer comes back as a ControlDone message."""
        self.run_worker(partial(self._send_blocking, [request]), thread=True, exit_on_error=False,
                        group="predict", name="predict")

    # -------------------------------------------------------------- toggles
    def _charts(self) -> list:
        return self._panels("plots")

    def action_toggle_log_y(self) -> None:
        """l: log-y on every chart."""
        charts = self._charts()
        for chart in charts:
            chart.toggle_log_y()
        if charts:
            self.say(f"charts: log-y {'on' if charts[0].log_y else 'off'}")

    def action_cycle_smoothing(self) -> None:
        """s: next EMA smoothing weight (every chart)."""
        charts = self._charts()
        level = None
        for chart in charts:
            level = chart.cycle_smoothing()
        if level is not None:
            self.say(f"charts: smoothing {level:g}" if level else "charts: smoothing off (raw)")

    def action_toggle_window(self) -> None:
        """h: recent 1000 steps ↔ full history (every chart)."""
        window = None
        for chart in self._charts():
            window = chart.toggle_window()
        if window is not None:
            self.say(f"charts: {'full history' if window == 'full' else 'last 1000 steps'}")

    def action_next_chart(self) -> None:
        """v: in the one-chart layout (< 100 columns), show the other chart."""
        shown = self.dashboard.next_chart()
        chart = self.dashboard.query_one(f"#chart-{shown}")
        self.say(f"chart {shown}: {self.model.describe(chart.shown(self.model)).label} (v switches, m chooses)")

    def action_choose_metric(self) -> None:
        """m: the metric chooser (which scalar each chart shows)."""
        if isinstance(self.screen, MetricScreen):
            return
        visible = self.dashboard.visible_charts()
        target = int(visible[-1].id.rsplit("-", 1)[1]) if visible else 1
        current = {int(c.id.rsplit("-", 1)[1]): c.shown(self.model) for c in visible}
        self.push_screen(MetricScreen(self.model.choices(), current, target), self._metric_chosen)

    def _metric_chosen(self, choice: tuple[int, str] | None) -> None:
        if choice is not None:
            self.choose_metric(*choice)

    def choose_metric(self, chart: int, name: str | None) -> None:
        """Chart ``chart`` (1-4) shows ``name`` from now on (None: the primary metric)."""
        widget = self.dashboard.query_one(f"#chart-{chart}")
        widget.choose(name)
        widget.update_from(self.model, force=True)
        shown = widget.shown(self.model)
        self.say(f"chart {chart}: {self.model.describe(shown).label or shown}")

    # -------------------------------------------------------------- compare
    def action_pick_compare(self) -> None:
        """o: the run picker — overlay another run's curves (or clear the overlay)."""
        from tui.screens.runs import RunPickerScreen

        if not isinstance(self.screen, RunPickerScreen):
            self.push_screen(RunPickerScreen(self.runs_root(), self.run_dir), self._compare_chosen)

    def runs_root(self):
        """Where the run picker lists runs: the parent of this run's directory, else ./runs."""
        from pathlib import Path

        return Path(self.run_dir).parent if self.run_dir else Path("runs")

    def _compare_chosen(self, path: str | None) -> None:
        if path == "":
            self.model.set_compare(None)
            self.redraw(force=True)
            self.say("compare: cleared")
        elif path:
            self.load_compare(path)

    def load_compare(self, path: str) -> None:
        """Read another run's history on a thread worker and overlay it on every chart, aligned by step."""
        self.say(f"compare: reading {path}…", "pending")
        self.run_worker(partial(self._read_compare, path), thread=True, exit_on_error=False, group="compare",
                        name="compare")

    def _read_compare(self, path: str) -> None:
        from tui.model.compare import read_run

        try:
            other = read_run(path, self.model.capacity)
        except (OSError, ValueError) as exc:
            self.post_message(CompareLoaded(path, None, str(exc).splitlines()[0] if str(exc) else type(exc).__name__))
            return
        self.post_message(CompareLoaded(path, other))

    def on_compare_loaded(self, message: CompareLoaded) -> None:
        if message.model is None:
            self.say(f"compare {message.path}: {message.error}", "error")
            return
        self.model.set_compare(message.model)
        self.redraw(force=True)
        name = message.model.started.name if message.model.started else message.path
        self.say(f"compare: {name} ({message.model.step} steps) overlaid, aligned by step", "ok")

    def action_help(self) -> None:
        """?: the help screen."""
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(read_only=self.read_only))

    def set_theme(self, name: str) -> None:
        """Switch theme (command palette)."""
        self.theme = themes.resolve(name)

    def _run_name(self) -> str:
        return self.model.started.name if self.model.started and self.model.started.name else "the run"

