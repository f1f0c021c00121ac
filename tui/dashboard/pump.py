"""The session worker's loop: open the session, replay history, poll, batch, post.

Runs in a Textual thread worker. ``Session.poll`` blocks without holding the
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
    HistoryFolded,
    LivenessChanged,
    SessionFailed,
    SessionReady,
    StartCancelled,
)
from tui.model.history_fold import TAIL_STEPS

#: How long events are gathered before one batch is posted (seconds).
BATCH_S = 0.08
#: How often liveness is asked (it may stat files / send a heartbeat probe).
LIVENESS_S = 1.0
#: A batch is posted early when it gets this big, so memory stays bounded in a flood.
MAX_BATCH = 20_000
#: Longest wait for the UI to show a long history's preview before its full fold starts anyway (s).
SHOWN_WAIT_S = 10.0


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
                 batch_s: float = BATCH_S, fold: Callable | None = None) -> None:
        self.factory = factory
        #: ``fold(history)``: a long history's HistoryFold to finish here after the preview (None: none).
        self.fold = fold
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
            try:
                # With a fold to finish here, a long log without an index is read as a tail first (every other
                # event, the newest steps): the whole decode then happens after the first frame, in _finish.
                tail = getattr(session, "history_tail", None) if self.fold is not None else None
                history = tail(TAIL_STEPS) if tail is not None else session.history()
            except Exception as exc:  # noqa: BLE001
                self.post(SessionFailed(f"cannot read the run's history: {_one_line(exc)}", fatal=False))
                history = []
            if history:
                # A History stays columnar: RunModel folds its steps from columns (a 1M-step run in well
                # under a second instead of building a million event objects). A long one is folded in two:
                # the UI folds the newest steps for the first frame, this thread every step after it.
                fold = self._fold_of(history)
                if fold is None and getattr(history, "steps_left_out", 0):
                    history = session.history()  # a tail read nobody will complete: read every step now
                self.post(EventBatch(history if hasattr(history, "others") else list(history), history=True,
                                     fold=fold))
                if fold is not None and not self._finish(fold, cancelled):
                    return
            self._loop(session, cancelled)
        finally:
            self.ready.set()
            self._close()

    def _open(self) -> Session:
        """The factory's session; a launching factory (``open(watch)``) reports the start through the watch."""
        opener = getattr(self.factory, "open", None)
        return opener(self.start_watch) if opener is not None else self.factory()

    def _fold_of(self, history):
        if self.fold is None:
            return None
        try:
            return self.fold(history)
        except Exception:  # noqa: BLE001 - no preview then: the UI folds the whole history itself, as before
            return None

    def _finish(self, fold, cancelled: Callable[[], bool]) -> bool:
        """Fold every step of a long history once the UI shows its preview, then post it; False when stopped.

        Live polling starts only after this: no live step can reach the model between the preview and the
        full fold, so the model swaps rings instead of merging them. The numpy work mostly runs without the
        GIL, so the UI stays responsive meanwhile.
        """
        deadline = time.monotonic() + SHOWN_WAIT_S
        while not fold.shown.wait(0.05):
            if self.stop.is_set() or cancelled():
                return False
            if time.monotonic() > deadline:
                break
        try:
            fold.finish()
        except Exception as exc:  # noqa: BLE001 - the preview stays on screen; say why the rest is missing
            self.post(SessionFailed(f"folding the whole history failed: {_one_line(exc)}", fatal=False))
        self.post(HistoryFolded(fold))
        return True

    def _loop(self, session: Session, cancelled: Callable[[], bool]) -> None:
        pending: list = []
        window_start = time.monotonic()
        next_liveness = 0.0
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

    def _close(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            try:
                session.close()
            except Exception:  # noqa: BLE001 - closing is best effort on the way out
                pass
        self.closed.set()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
