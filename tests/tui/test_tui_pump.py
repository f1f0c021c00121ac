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


def test_a_new_runs_record_is_handed_over_once_the_engine_wrote_it_and_its_step_lines_stop(tmp_path):
    """A run of this version whose engine has not written its record yet: its step lines come from the log
    meanwhile; once the record is there the UI gets it, and the log's step lines are no longer decoded."""
    import numpy as np

    from engine.run.control.client import RunClient
    from engine.run.sinks import JsonlSink
    from engine.run.steps import StepWriter

    run = tmp_path / "new"
    run.mkdir()
    log = JsonlSink(run / "events.jsonl")  # schema 3: the record holds the steps
    log(ev.RunStarted(name="new", total_steps=100))
    log(ev.StepLogged(step=1, loss=2.0))
    log.close()
    posted: list = []
    client = RunClient(run, read_only=True)
    pump = SessionPump(lambda: client, posted.append, batch_s=0.05)
    thread = _run(pump)
    _until(lambda: any(isinstance(m, EventBatch) and m.history for m in posted))
    first = next(m for m in posted if isinstance(m, EventBatch) and m.history)
    assert first.steps is None and [e.type for e in first.events][-1] == "step", "no record yet: the log's steps"
    writer = StepWriter(run / "steps")
    writer.append_columns(np.arange(1, 51), {"loss": np.linspace(2, 1, 50)})
    writer.flush()
    _until(lambda: any(isinstance(m, EventBatch) and m.steps is not None for m in posted))
    handed = next(m for m in posted if isinstance(m, EventBatch) and m.steps is not None)
    assert handed.steps.rows == 50
    with open(run / "events.jsonl", "a") as out:
        out.write(ev.to_json(ev.StepLogged(step=51, loss=1.0)) + "\n" + ev.to_json(ev.EvalDone(step=51)) + "\n")
    _until(lambda: any(isinstance(e, ev.EvalDone) for m in posted if isinstance(m, EventBatch) for e in m.events))
    after = [e.type for m in posted[posted.index(handed):] if isinstance(m, EventBatch) for e in m.events]
    assert after == ["eval"], after
    pump.stop.set()
    thread.join(5)
    writer.close()


def test_a_long_runs_clock_samples_are_read_only_as_far_as_the_dashboard_keeps_them(tmp_path):
    """A long run's log holds a memory sample every ~100 steps and a system sample every 2 s: the dashboard
    keeps the newest MEMORY_SAMPLES of the first and the newest of the second, and its worker reads no more,
    the memory samples as the ring's columns with only the newest an event, so the model it builds is the one
    a whole read builds, from a bounded number of decoded events."""
    import numpy as np

    from engine.run.control.client import RunClient
    from engine.run.history import read_history
    from tui.model.dashboard import MEMORY_SAMPLES, RunModel

    run = tmp_path / "long"
    run.mkdir()
    samples = MEMORY_SAMPLES + 3_000
    with open(run / "events.jsonl", "w") as out:
        out.write(ev.to_json(ev.RunStarted(t=1.0, name="long", total_steps=100 * samples)) + "\n")
        for i in range(samples):
            out.write(f'{{"type":"memory","t":{2.0 + i},"step":{100 * i},"allocated":{i},"peak":{2 * i}}}\n')
            if i % 50 == 0:
                out.write(ev.to_json(ev.SystemSampled(t=2.0 + i, cpu_percent=i % 100)) + "\n")
            if i % 10_000 == 0:
                out.write(ev.to_json(ev.EvalDone(t=2.0 + i, step=100 * i, val_loss=1.0 / (i + 1))) + "\n")
    posted: list = []
    pump = SessionPump(lambda: RunClient(run, read_only=True), posted.append, batch_s=0.05)
    thread = _run(pump)
    try:
        _until(lambda: any(isinstance(m, EventBatch) and m.history for m in posted), timeout=30)
    finally:
        pump.stop.set()
        thread.join(5)
    history = next(m for m in posted if isinstance(m, EventBatch) and m.history).events
    assert history.count_type("memory") == 1 and history.count_type("system") == 1
    assert len(history.sample_columns["memory"]["step"]) == MEMORY_SAMPLES
    assert history.samples_left_out == samples - 1 + len(range(0, samples, 50)) - 1
    assert history.count_type("eval") == len(range(0, samples, 10_000))
    bounded, whole = RunModel(), RunModel()
    bounded.ingest(history)
    whole.ingest(read_history(run / "events.jsonl"))
    assert np.array_equal(bounded.memory.view(), whole.memory.view(), equal_nan=True)
    assert len(whole.memory) == MEMORY_SAMPLES
    assert bounded.last_memory == whole.last_memory and bounded.system == whole.system
    assert [e.text for e in bounded.take_log()] == [e.text for e in whole.take_log()]
