"""The session worker's loop: open the session, find the run's step record, replay history, poll, batch, post.

Runs in a Textual thread worker. The per-step values come from the run's step record
(tui.model.step_open): opened here and handed to the UI, which reads only what it draws;
an old run's log is converted into one first, with progress reports (the UI shows the part
converted so far at once); a new run's record is opened as soon as the engine has written
it, its step lines read from the log meanwhile. The history read from the log then leaves
its step lines out, as ``poll`` does. ``Session.poll`` blocks without holding the
GIL, so waiting costs the UI nothing; events are gathered for ``batch_s``
(~80 ms) and posted as one message, because a message per step cost a 2 000
steps/s loop 40-50 % of its speed (research/textual-in-process.md). The
session factory is called here, not on the UI thread, so an engine session
that imports torch (in-process) does it after the first frame is on screen.
A factory that launches an engine (``open(watch)``) reports through a
``StartWatch`` while it waits: the engine's pid and each start-up phase go to
the UI as they come, and the UI may ask it to stop the starting engine
(``cancel``) or to stop waiting for it (``give_up``, a detach).
Textual-free apart from the messages it builds: ``post`` is any callable.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable

from engine.run.control.launcher import LaunchWatch
from engine.run.control.session import Session
from engine.run.rundir import Liveness
from tui.dashboard.messages import (
    EngineSpawned,
    EventBatch,
    LivenessChanged,
    SessionFailed,
    SessionReady,
    StartCancelled,
    StepsProgress,
)
from tui.model import step_open
from tui.model.dashboard import SAMPLE_COLUMNS, SAMPLES_KEPT

#: How long events are gathered before one batch is posted (seconds).
BATCH_S = 0.08
#: How often liveness is asked (it may stat files / send a heartbeat probe).
LIVENESS_S = 1.0
#: A batch is posted early when it gets this big, so memory stays bounded in a flood.
MAX_BATCH = 20_000
#: How often a run whose record is not there yet is looked at again (s).
RECORD_LOOK_S = 0.5


class Stopped(Exception):
    """The worker was stopped during a conversion (what was converted stays; the next open goes on)."""


def is_detachable(session: Session) -> bool:
    """True when quitting may leave the engine running (``Session.detachable``)."""
    return bool(session.detachable)


def _run_dir_text(session: Session) -> str | None:
    try:
        rd = session.run_dir()
    except Exception:  # noqa: BLE001
        return None
    if rd is None:
        return None
    if isinstance(rd, (str, os.PathLike)):  # (a Path has a .root too: "" or "/", not the run directory)
        return str(rd)
    return str(getattr(rd, "root", rd))  # engine.run.rundir.RunDir


class StartWatch(LaunchWatch):
    """A launching factory's reports, posted to the UI; ``cancel`` stops the starting engine, ``give_up`` only
    stops waiting for it (it keeps starting: the UI's detach line names it)."""

    def __init__(self, post: Callable, give_up: threading.Event) -> None:
        self.post = post
        self.cancel = threading.Event()
        self.give_up = give_up
        #: The starting engine's pid (None before it exists).
        self.pid: int | None = None

    def spawned(self, pid: int, run_dir) -> None:
        self.pid = pid
        self.post(EngineSpawned(pid, str(run_dir)))

    def phase(self, event) -> None:
        self.post(EventBatch([event]))

    def cancelled(self) -> bool:
        return self.cancel.is_set()

    def abandoned(self) -> bool:
        return self.give_up.is_set()


class SessionPump:
    """Owns one Session on a worker thread; ``stop`` is the flag the loop checks between polls."""

    def __init__(self, factory: Callable[[], Session], post: Callable, read_only: bool = False,
                 batch_s: float = BATCH_S) -> None:
        self.factory = factory
        self.post = post
        self.force_read_only = read_only
        self.batch_s = batch_s
        self.stop = threading.Event()
        #: The session once the factory returned (send() uses it from other threads).
        self.session: Session | None = None
        self.ready = threading.Event()
        self.closed = threading.Event()
        #: What a launching factory reports while the engine starts (and how the UI stops it); a stopped pump
        #: stops waiting for it.
        self.start_watch = StartWatch(post, give_up=self.stop)

    def run(self, cancelled: Callable[[], bool] = lambda: False) -> None:
        """The worker body: returns when ``stop`` is set (or the worker is cancelled), closing the session."""
        try:
            try:
                session = self._open()
            except Exception as exc:  # noqa: BLE001 - any failure to open is shown, never raised into Textual
                if self.start_watch.cancel.is_set():
                    self.post(StartCancelled(str(exc).strip(), getattr(exc, "exit_code", None) or 130))
                elif not self.start_watch.give_up.is_set():  # given up: the UI has gone and said why
                    # A launch the engine refused says all of it (reason, every option, the log's path:
                    # LaunchError.whole); anything else in one line.
                    whole = getattr(exc, "whole", None)
                    self.post(SessionFailed(whole() if callable(whole) else _one_line(exc)))
                return
            self.session = session
            self.ready.set()
            self.post(SessionReady(self.force_read_only or bool(getattr(session, "read_only", False)),
                                   is_detachable(session), _run_dir_text(session)))
            run_dir = _run_dir_path(session)
            plan = step_open.plan(run_dir)
            steps = step_open.open_steps(run_dir) if plan == "record" else None
            try:
                history = session.history(steps=plan not in ("record", "convert"), newest=SAMPLES_KEPT,
                                          columns=SAMPLE_COLUMNS)
            except Exception as exc:  # noqa: BLE001
                self.post(SessionFailed(f"cannot read the run's history: {_one_line(exc)}", fatal=False))
                history = []
            if history or steps is not None:
                # A History stays columnar: RunModel folds its steps (a log without a record) from columns.
                self.post(EventBatch(history if hasattr(history, "others") else list(history), history=True,
                                     steps=steps))
            if plan == "convert" and not self._convert(run_dir, cancelled):
                return
            self._loop(session, cancelled, run_dir if plan == "wait" else None,
                       run_dir if plan in ("record", "convert") else None)
        finally:
            self.ready.set()
            self._close()

    def _open(self) -> Session:
        """The factory's session; a launching factory (``open(watch)``) reports the start through the watch."""
        opener = getattr(self.factory, "open", None)
        return opener(self.start_watch) if opener is not None else self.factory()

    def _convert(self, run_dir, cancelled: Callable[[], bool]) -> bool:
        """Convert an old run's log into its record (in a child process: tui.model.step_open), the UI showing it
        from the first chunk on; False when stopped (the child is killed; the next open goes on from where it
        was). A conversion that fails leaves the charts empty and says why (the log is never changed)."""
        opened = False

        def progress(done: int, total: int) -> None:
            # Every report is posted, with no time limit: the conversion reports once per 16 MB chunk of log
            # (engine.run.steps.convert; a few a second), and a limit would drop every report between the first
            # and the end whenever the child's lines arrive in a bunch (a loaded box), so the part converted by
            # then would never be shown as a part. The report goes before the record's first part: the UI knows
            # a conversion is going on before it draws that part, and no moment shows a part as the whole run.
            nonlocal opened
            if self.stop.is_set() or cancelled():
                raise Stopped
            self.post(StepsProgress(done, total))
            if not opened:
                steps = step_open.open_steps(run_dir)
                if steps is not None:
                    opened = True
                    self.post(EventBatch([], steps=steps))

        try:
            step_open.convert_apart(run_dir, progress)
        except Stopped:
            return False
        except Exception as exc:  # noqa: BLE001 - reported; the run's other events are still shown
            self.post(StepsProgress(0, 0, finished=True))
            self.post(SessionFailed(f"converting the run's log into its step record failed: {_one_line(exc)}",
                                    fatal=False))
            return True
        if not opened:
            steps = step_open.open_steps(run_dir)
            if steps is not None:
                self.post(EventBatch([], steps=steps))
        self.post(StepsProgress(1, 1, finished=True))
        return True

    def _loop(self, session: Session, cancelled: Callable[[], bool], waiting_for=None, converted=None) -> None:
        """Poll, batch and post until stopped; ``waiting_for``: a run directory whose record is not written yet
        (looked at every RECORD_LOOK_S, handed to the UI once it is there); ``converted``: one whose record may
        have been converted from its log (an old engine still writing it: what it appended is converted too)."""
        pending: list = []
        window_start = time.monotonic()
        next_liveness = next_look = 0.0
        liveness = None
        failures = 0
        while not self.stop.is_set() and not cancelled():
            try:
                pending.extend(session.poll(timeout=self.batch_s / 2))
                failures = 0
            except Exception as exc:  # noqa: BLE001 - a flaky channel is reported, then retried
                failures += 1
                if failures == 1:
                    self.post(SessionFailed(f"reading events failed (retrying): {_one_line(exc)}", fatal=False))
                self.stop.wait(min(2.0, 0.1 * failures))
            now = time.monotonic()
            if now >= next_look:
                next_look = now + RECORD_LOOK_S
                if self._look_at_record(waiting_for, converted, pending):
                    waiting_for, pending, window_start = None, [], now
                if converted is not None and not self._carry_on(converted):
                    converted = None
            if pending and (now - window_start >= self.batch_s or len(pending) >= MAX_BATCH):
                self.post(EventBatch(pending))
                pending = []
            if not pending:
                window_start = now
            if now >= next_liveness:
                next_liveness = now + LIVENESS_S
                try:
                    current = session.liveness_detail()
                except Exception:  # noqa: BLE001
                    current = Liveness("unknown")
                if current != liveness:  # equal while nothing shown changed (a stall's detail is fixed while it lasts)
                    liveness = current
                    if pending:  # what the run said before it ended reaches the model before the word that it
                        # ended (its RunFinished: the summary's checkpoint and resume command)
                        self.post(EventBatch(pending))
                        pending, window_start = [], now
                    self.post(LivenessChanged(current.state, current))
        if pending:
            self.post(EventBatch(pending))

    def _look_at_record(self, waiting_for, converted, pending: list) -> bool:
        """A new run's record, once the engine wrote it: handed to the UI (after the step events gathered
        before, which go to the memory series); True when it was."""
        if waiting_for is None:
            return False
        steps = step_open.open_steps(waiting_for)
        if steps is None:
            return False
        if pending:
            self.post(EventBatch(pending))
        self.post(EventBatch([], steps=steps))
        getattr(self.session, "steps_elsewhere", lambda: None)()  # the log's step lines are not decoded now
        return True

    def _carry_on(self, converted) -> bool:
        """An old engine still writing its log: convert the steps it appended (the UI reads them at its next
        tick); False when that failed (said once, then no more tries)."""
        if not step_open.stale(converted):
            return True
        try:
            step_open.convert_apart(converted)
        except Exception as exc:  # noqa: BLE001 - reported once; the events still come
            self.post(SessionFailed(f"converting the run's new steps failed: {_one_line(exc)}", fatal=False))
            return False
        return True

    def _close(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            try:
                session.close()
            except Exception:  # noqa: BLE001 - closing is best effort on the way out
                pass
        self.closed.set()


def _run_dir_path(session: Session):
    """The session's run directory as a Path (None: a session without one)."""
    from pathlib import Path

    text = _run_dir_text(session)
    return Path(text) if text else None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
