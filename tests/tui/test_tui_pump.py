"""The session worker loop: factory on the worker thread, batched posts, stop closes the session."""

from __future__ import annotations

import threading
import time

from engine.run import events as ev
from tui.dashboard.messages import EventBatch, SessionFailed, SessionReady
from tui.dashboard.pump import SessionPump
from tui.dashboard.scripted import ScriptedSession


def _run(pump: SessionPump) -> threading.Thread:
    thread = threading.Thread(target=pump.run, daemon=True)
    thread.start()
    return thread


def _until(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_factory_runs_on_the_worker_and_events_arrive_batched():
    posted: list = []
    threads: list[str] = []
    session = ScriptedSession(history=[ev.RunStarted(name="x")])

    def factory():
        threads.append(threading.current_thread().name)
        return session

    pump = SessionPump(factory, posted.append, batch_s=0.08)
    thread = _run(pump)
    _until(lambda: pump.session is not None)
    for step in range(2000):  # a flood, as a 2 000 steps/s loop would make
        session.push(ev.StepLogged(step=step, loss=1.0))
    _until(lambda: sum(len(m.events) for m in posted if isinstance(m, EventBatch) and not m.history) == 2000)
    pump.stop.set()
    thread.join(5)
    assert len(threads) == 1 and threads[0] != threading.main_thread().name, "factory must run on the worker"
    assert isinstance(posted[0], SessionReady)
    assert isinstance(posted[1], EventBatch) and posted[1].history and posted[1].events[0].name == "x"
    live = [m for m in posted if isinstance(m, EventBatch) and not m.history]
    assert len(live) <= 5, f"2000 events should need a handful of messages, got {len(live)}"
    assert session.closed.is_set() and pump.closed.is_set()


def test_a_failing_factory_is_reported_not_raised():
    posted: list = []

    def factory():
        raise FileNotFoundError("runs/nope: no such run directory\nmore detail")

    pump = SessionPump(factory, posted.append)
    thread = _run(pump)
    thread.join(5)
    assert not thread.is_alive()
    assert len(posted) == 1 and isinstance(posted[0], SessionFailed) and posted[0].fatal
    assert posted[0].error == "FileNotFoundError: runs/nope: no such run directory"


def test_the_events_before_an_end_arrive_before_the_word_that_it_ended():
    """A RunFinished still in the batch window when liveness says "aborted" is posted first: the summary
    the app prints at that moment has the run's checkpoint and resume command (a race on CI had them not)."""
    from tui.dashboard.messages import LivenessChanged

    posted: list = []
    session = ScriptedSession(history=[ev.RunStarted(name="x")])
    pump = SessionPump(lambda: session, posted.append, batch_s=30.0)  # nothing leaves by the window alone
    thread = _run(pump)
    _until(lambda: pump.session is not None)
    session.push(ev.RunFinished(status="aborted", steps=3, checkpoint="c.safetensors", resume_command="resume"))
    _until(lambda: any(isinstance(m, LivenessChanged) and m.liveness == "aborted" for m in posted))
    ended = next(i for i, m in enumerate(posted) if isinstance(m, LivenessChanged) and m.liveness == "aborted")
    finished = [i for i, m in enumerate(posted) if isinstance(m, EventBatch)
                and any(isinstance(e, ev.RunFinished) for e in m.events)]
    assert finished and finished[0] < ended
    pump.stop.set()
    session.close()  # wakes the worker's poll
    thread.join(5)
