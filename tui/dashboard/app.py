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

The app draws and routes; its jobs live in parts it owns: ``lifecycle``
(tui.dashboard.lifecycle: quit, detach, hang-up, the exit summary),
``controls`` (tui.dashboard.controls: what is sent to the engine and its
answers) and ``views`` (tui.dashboard.views: chart toggles, the metric
chooser, the compare overlay). Each part is given what the dashboard watches
(tui.dashboard.watch.Watch) and the few callables it acts through, never the
app. Textual looks actions up on the app, so each key's ``action_*`` here
hands over to its part; the tune and autotune screens send their own
requests from their own workers (through ``link``), and every real answer
comes back here as a ControlDone.
"""

from __future__ import annotations

from functools import partial
from typing import Callable

from textual import work
from textual.app import App
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.widgets import Footer
from textual.worker import get_current_worker

import themes
from engine.run import events as ev
from engine.run.control.requests import Request
from engine.run.control.session import Session
from tui.dashboard.controls import ControlLink, Controls
from tui.dashboard.keys import KeyState, key_active, key_state
from tui.dashboard.lifecycle import Lifecycle
from tui.dashboard.messages import (
    CompareLoaded,
    ControlDone,
    EngineSpawned,
    EventBatch,
    LivenessChanged,
    SessionFailed,
    SessionReady,
    StartCancelled,
    StepsProgress,
)
from tui.dashboard.palette import DashboardCommands
from tui.dashboard.pump import BATCH_S, SessionPump
from tui.dashboard.views import ChartViews, read_compare
from tui.dashboard.watch import Watch
from tui.model.dashboard import RunModel
from tui.model.pace import MAX_TEXT_HZ, check_refresh
from tui.screens.dashboard import DashboardScreen
from tui.screens.help import HelpScreen


class DashboardApp(App[int]):
    """The training dashboard. ``session_factory`` is called on the worker thread and returns a Session."""

    CSS_PATH = themes.CSS_PATHS
    TITLE = "sensorlm-tui"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide"), (160, "-xwide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (34, "-tall"), (50, "-xtall")]
    COMMANDS = App.COMMANDS | {DashboardCommands}
    BINDINGS = [Binding("ctrl+q", "request_quit", "quit", show=False, priority=True),
                Binding("ctrl+c", "interrupt", "stop", key_display="^c", priority=True),
                Binding("ctrl+c", "interrupt_quiet", "stop", show=False, priority=True)]

    def __init__(self, session_factory: Callable[[], Session],
                 theme: str | None = None, refresh: float | None = None, read_only: bool = False,
                 ansi: bool = False, batch_s: float = BATCH_S,
                 in_process: bool = False, compare: str | None = None) -> None:
        theme_name = themes.resolve("ansi" if ansi else theme)
        plot_hz = check_refresh(refresh)
        super().__init__(ansi_color=True if ansi else None)
        themes.register(self)
        self.theme = theme_name
        #: Seconds between plot / text redraws.
        self.plot_period = 1.0 / plot_hz
        # Text at the plot rate (1 Hz by default: bytes matter over SSH), the progress panel's step row alone at
        # 4 Hz: the step a watcher reads stays a fraction of a second behind, for one row's bytes.
        self.text_period, self.progress_period = max(1.0 / MAX_TEXT_HZ, min(1.0, self.plot_period)), 1.0 / MAX_TEXT_HZ
        #: What this dashboard watches: the model the panels show, the session worker's loop (its session, stop
        #: and closed events; replaced when another session is watched) and the viewer's terms.
        self.watch = Watch(RunModel(), SessionPump(session_factory, self.post_message, read_only=read_only,
                                                   batch_s=batch_s),
                           read_only=read_only, in_process=in_process)
        #: The one way a control reaches the engine (the screens send through it too).
        self.link = ControlLink(lambda: self.watch.session, self.post_message)
        #: Pause / resume, checkpoint, abort, tune, autotune.
        self.controls = Controls(self.watch, self.link, say=self.say, push_screen=self.push_modal,
                                 send_in_background=self.send_in_background)
        #: Quit, detach, abort-then-exit, hang-up: how this app ends and the line it prints.
        self.lifecycle = Lifecycle(self.watch, say=self.say, redraw=self.redraw, exit=self._exit_with,
                                   push_screen=self.push_modal, abort_with=self.abort_with,
                                   headless=lambda: self.is_headless)
        #: Chart toggles, the metric chooser, the compare overlay.
        self.views = ChartViews(self.watch, lambda: self.dashboard, say=self.say, redraw=self.redraw,
                                push_screen=self.push_modal, read_in_background=self.read_compare_in_background)
        self._failed_panels: set[str] = set()
        self._controls_shown: KeyState | None = None
        #: A run directory to overlay once the app is up (``attach --compare``).
        self._compare_at_start = compare

    # ------------------------------------------------------------ lifecycle
    def get_default_screen(self) -> DashboardScreen:
        return DashboardScreen(id="dashboard")

    # The watched state, by the names the app's users (tests, attach) read.
    model = property(lambda self: self.watch.model, doc="Everything the panels show (a RunModel).")
    pump = property(lambda self: self.watch.pump, doc="The session worker's loop.")
    read_only = property(lambda self: self.watch.read_only, doc="True for a viewer that may look, not steer.")
    in_process = property(lambda self: self.watch.in_process, doc="True when the Trainer runs in this process.")
    detachable = property(lambda self: self.watch.detachable, doc="True when quitting may leave the engine running.")
    run_dir = property(lambda self: self.watch.run_dir, doc="The run's directory (None until it is known).")

    def on_mount(self) -> None:
        self.model.set_viewer(read_only=self.read_only)
        if self.in_process:
            # The trainer thread the session worker starts begins by importing torch, which holds the GIL for
            # most of a second: a frame drawn meanwhile comes ~0.4 s late. So the phase it is in is drawn
            # first (the engine's own report of it follows and is the same phase: tui.model.phases), and the
            # worker starts once that frame is out: the trainer starts a frame later.
            self.model.ingest([ev.PhaseStarted(phase="importing torch")])
            self.call_after_refresh(self._draw_then_start_session)
        else:
            self._start_session()
        #: The redraw timers by the panels they feed.
        self.ticks = {kind: self.set_interval(period, partial(self._tick, kind), name=kind) for kind, period in
                      (("text", self.text_period), ("progress", self.progress_period), ("plots", self.plot_period))}
        self.theme_changed_signal.subscribe(self, lambda _theme: self.redraw(force=True))
        if self._compare_at_start:
            self.views.load_compare(self._compare_at_start)
        self.lifecycle.install_hangup()

    def _draw_then_start_session(self) -> None:
        self.redraw()
        self.call_after_refresh(self._start_session)

    def _start_session(self) -> None:
        self.run_worker(self._pump_body, thread=True, exit_on_error=False, name="session", group="session")

    def on_unmount(self) -> None:
        self.pump.stop.set()  # the worker closes the session after its current poll (≤ batch_s / 2)
        self.lifecycle.remove_hangup()

    def _pump_body(self) -> None:
        worker = get_current_worker()
        self.pump.run(cancelled=lambda: worker.is_cancelled)

    @property
    def session(self) -> Session | None:
        """The open session (None before it opened and after it closed)."""
        return self.watch.session

    def wait_closed(self, timeout: float) -> bool:
        """Block until the worker has closed the session (it does so after its current poll, ≤ batch_s / 2,
        plus whatever the session's own close costs); True if it did within ``timeout`` seconds.

        Textual returns from ``run`` without joining thread workers, so whoever prints the final summary
        waits here first: the line then describes a session that is really closed.
        """
        return self.pump.closed.wait(timeout)

    summary = property(lambda self: self.lifecycle.summary,
                       doc="The line to print after the app exits (how the run ended, its checkpoint, how to resume).")
    summary_is_error = property(lambda self: self.lifecycle.summary_is_error,
                                doc="True when ``summary`` is an error (print it to stderr).")

    # ------------------------------------------------------------- drawing
    @property
    def dashboard(self) -> DashboardScreen:
        """The main screen, at the bottom of the stack (also while a modal is on top)."""
        return self.screen_stack[0]  # type: ignore[return-value]

    def panels(self, kind: str) -> list:
        """The panels to feed; [] while the screen is not composed (start-up) or being torn down (exit)."""
        try:
            screen = self.dashboard
            if kind == "plots":
                return screen.charts
            names = ("progress",) if kind == "progress" else ("header", "progress", "memory", "system", "log")
            return [screen.query_one(f"#{name}") for name in names]
        except (IndexError, NoMatches, AttributeError):
            return []

    def _tick(self, kind: str) -> None:
        """A redraw timer's turn: the panels of ``kind`` that changed (text: the clocks and the footer too)."""
        if kind != "plots":
            self.model.refresh_steps()  # what a live run appended to its step record
        if kind == "text":
            self.model.tick()  # clocks tick while nothing else moves
            self.sync_footer()
        rows = {"rows": 1} if kind == "progress" else {}  # the step row alone: the rest moves at the text rate
        for panel in self.panels(kind):
            self.safe(panel, partial(panel.update_from, **rows), self.model)

    def sync_footer(self) -> None:
        """Refresh the footer's keys when what they do changed (paused ↔ running, connected, ended, read-only,
        detach or quit, the width)."""
        shown = key_state(self.watch, self.size.width)
        if shown != self._controls_shown:
            self._controls_shown = shown
            try:
                self.dashboard.query_one(Footer).show_command_palette = shown.palette
                self.dashboard.refresh_bindings()
            except (IndexError, NoMatches):
                pass

    def on_resize(self, event) -> None:
        self.sync_footer()

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """Footer and keys follow the state: what each key does now (tui.dashboard.keys)."""
        return key_active(key_state(self.watch, self.size.width), action)

    def get_system_commands(self, screen):
        """Textual's palette commands minus its theme picker: the dashboard's "theme: …" commands are the one
        theme system (Textual's own themes would bypass the dashboard's palettes and its ansi mode)."""
        for command in super().get_system_commands(screen):
            if command.title.lower() != "theme":
                yield command

    def redraw(self, force: bool = False) -> None:
        """Update every panel now (``force`` even if nothing changed: theme switch, tests)."""
        for panel in self.panels("text") + self.panels("plots"):
            self.safe(panel, panel.update_from, self.model, force)
        self.sync_footer()

    def safe(self, panel, fn, *args) -> None:
        """``fn(*args)`` for ``panel``; a failure is shown once (report_widget_error), never raised."""
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
    def on_event_batch(self, message: EventBatch) -> None:
        try:
            if message.steps is not None:
                self.model.open_steps(message.steps)
            self.model.ingest(message.events)
        except Exception as exc:  # noqa: BLE001 - a malformed event is reported, not fatal
            self.model.note("error", f"could not show an event batch ({type(exc).__name__}: {exc})")
        if message.history or message.steps is not None or self.model.starting_up:  # (a phase: at once)
            self.redraw()
        self.sync_footer()
        self.lifecycle.check_ended()

    def on_steps_progress(self, message: StepsProgress) -> None:
        self.views.converting(message.done, message.total, message.finished)
        self.redraw()

    def on_session_ready(self, message: SessionReady) -> None:
        self.watch.read_only = message.read_only
        self.watch.detachable = message.detachable and not self.in_process
        self.watch.run_dir = message.run_dir
        self.model.set_viewer(connection="connected", read_only=message.read_only)
        self.say("read-only viewer: watching only" if message.read_only else "connected", "info")

    def on_session_failed(self, message: SessionFailed) -> None:
        if message.fatal:  # the whole error (a launch refusal's options too) is printed once the terminal is back
            self.model.set_viewer(connection=f"failed: {message.error.splitlines()[0]}")
            self.lifecycle.leave(1, f"sensorlm-tui: error: {message.error}", error=True)
            return
        self.model.note("error", message.error)
        self.say(message.error, "error")

    def on_engine_spawned(self, message: EngineSpawned) -> None:
        self.watch.run_dir = message.run_dir
        self.model.set_viewer(connection=f"starting the engine (pid {message.pid})")

    def on_start_cancelled(self, message: StartCancelled) -> None:
        self.lifecycle.start_cancelled(message.line, message.exit_code)

    def on_liveness_changed(self, message: LivenessChanged) -> None:
        self.model.set_liveness(message.liveness, message.detail)
        if self.model.stall is not None:  # the status bar says why the run stands still, and what resumes it
            self.say(self.model.stall.describe(), "warning")
        self.sync_footer()
        self.lifecycle.check_ended()

    def on_control_done(self, message: ControlDone) -> None:
        """A real control's answer, whichever screen sent it (ControlLink posts it)."""
        self.controls.answered(message)
        self.sync_footer()
        self.lifecycle.check_ended()

    def on_compare_loaded(self, message: CompareLoaded) -> None:
        self.views.compare_loaded(message)

    # -------------------------------------------------------------- workers and modals the parts act through
    @work(thread=True, exit_on_error=False, group="control")
    def send_in_background(self, requests: list[Request]) -> None:
        """Send ``requests`` in order on a thread worker; each answer comes back as a ControlDone (ControlLink)."""
        for request in requests:
            try:
                self.link(request)
            except Exception:  # noqa: BLE001 - the link has posted the failure as a ControlDone
                pass

    @work(thread=True, exit_on_error=False, group="compare")
    def read_compare_in_background(self, path: str) -> None:
        """Read another run on a thread worker; it comes back as a CompareLoaded."""
        self.post_message(read_compare(path))

    def push_modal(self, screen, callback=None) -> None:
        """Open ``screen`` on top, unless the same kind of modal is on top already (a palette command or a key
        pressed twice)."""
        if type(self.screen) is not type(screen):
            self.push_screen(screen, callback)

    def _exit_with(self, code: int) -> None:
        self.exit(result=code, return_code=code)

    # -------------------------------------------------------------- actions (keys, palette)
    def action_explain(self, what: str) -> None:
        """A control key while no control may be sent (hidden from the footer): say why it does nothing."""
        self.controls.explain(what)

    def action_toggle_pause(self) -> None:
        """space: pause, or resume when paused (``pause`` and ``resume`` are its footer labels by the state)."""
        self.controls.toggle_pause()

    action_pause = action_resume = action_toggle_pause

    def action_checkpoint(self) -> None:
        """c: checkpoint now."""
        self.controls.checkpoint()

    def action_abort(self) -> None:
        """a: the abort modal (g graceful, n now, escape cancel)."""
        self.controls.abort()

    def abort_with(self, mode: str) -> None:
        """Send abort(mode); the app exits (printing the summary) once the engine has stopped."""
        self.controls.abort_with(mode)

    def action_tune(self) -> None:
        """t: the tune modal. A read-only viewer gets it too: it may ask for predictions, not apply."""
        self.controls.tune()

    def action_autotune(self) -> None:
        """f: search the fastest settings that fit (the engine measures its own steps) and show the table."""
        self.controls.autotune()

    def action_request_quit(self) -> None:
        """q: detach, the engine keeps running (in-process: ask, quitting stops the run); ``detach_key`` and
        ``quit_key`` are its footer labels by what it will do."""
        self.lifecycle.request_quit()

    action_detach_key = action_quit_key = action_request_quit

    def action_interrupt(self) -> None:
        """Ctrl-C: stop the run gracefully; again: at once (before connecting: stop the starting engine); where
        it stops nothing (read-only, ended: ``interrupt_quiet``), as the help says — detach or quit."""
        self.lifecycle.interrupt()

    action_interrupt_quiet = action_interrupt

    def action_view(self, name: str) -> None:
        """A view key at a width where the footer does not show it: the same action."""
        getattr(self, f"action_{name}")()

    def action_processes(self) -> None:
        """p: the process view (the engine and its data workers, or each rank: CPU, memory, state)."""
        from tui.screens.processes import ProcessScreen

        self.push_modal(ProcessScreen(self.watch.engine_pid(), self.run_dir))

    def detach(self, reason: str = "") -> None:
        """Close the dashboard and leave the engine running (in-process: the run stops); the summary says how
        to re-attach or resume."""
        self.lifecycle.detach(reason)

    def action_toggle_log_y(self) -> None:
        """l: log-y on every chart."""
        self.views.toggle_log_y()

    def action_cycle_smoothing(self) -> None:
        """s: next EMA smoothing weight (every chart)."""
        self.views.cycle_smoothing()

    def action_toggle_window(self) -> None:
        """h: recent 1000 steps ↔ full history (every chart)."""
        self.views.toggle_window()

    def action_chart(self, move: str, *args) -> None:
        """+ - ← → home end 0: every chart's steps (ChartViews' zoom, pan, to_edge, reset_view)."""
        getattr(self.views, move)(*args)

    def action_next_chart(self) -> None:
        """v: in the one-chart layout (< 100 columns), show the other chart."""
        self.views.next_chart()

    def action_choose_metric(self) -> None:
        """m: the metric chooser (which scalar each chart shows)."""
        self.views.open_chooser()

    def action_pick_compare(self) -> None:
        """o: the run picker — overlay another run's curves (or clear the overlay)."""
        self.views.pick_compare()

    def action_help(self) -> None:
        """?: the help screen."""
        self.push_modal(HelpScreen(read_only=self.read_only))

    def set_theme(self, name: str) -> None:
        """Switch theme (command palette)."""
        self.theme = themes.resolve(name)

    def run_name(self) -> str:
        """The run's name for messages ("the run" before RunStarted names it)."""
        return self.watch.run_name()

