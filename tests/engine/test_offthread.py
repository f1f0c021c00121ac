"""The off-thread sinks: the training thread queues, the drainer delivers, and nothing about what arrives changes."""

from __future__ import annotations

import json
import threading
import time

from engine.run import events as ev
from engine.run.offthread import OffThreadSinks
from engine.run.sinks import JsonlSink

FOREVER = 3600.0  # a drainer that never wakes by itself: what arrives, arrives through emit, flush or close


class Recorder:
    def __init__(self) -> None:
        self.events: list = []
        self.threads: list[str] = []
        self.closed = False

    def __call__(self, event) -> None:
        self.events.append(event)
        self.threads.append(threading.current_thread().name)

    def close(self) -> None:
        self.closed = True


def steps(first: int, last: int) -> list[ev.StepLogged]:
    return [ev.StepLogged(step=s, loss=1.0 / s) for s in range(first, last + 1)]


def test_a_step_event_only_queues_and_the_drainer_delivers_it_in_order():
    sink = Recorder()
    records = OffThreadSinks([sink], interval=0.01).start()
    for event in steps(1, 50):
        records(event)
    assert len(sink.events) < 50  # the emitting thread did not deliver them all itself
    deadline = time.monotonic() + 5
    while len(sink.events) < 50 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [e.step for e in sink.events] == list(range(1, 51))
    assert set(sink.threads) == {"event-drainer"}
    records.close()


def test_an_urgent_event_is_delivered_before_emit_returns_with_every_step_before_it(tmp_path):
    path = tmp_path / "events.jsonl"
    jsonl = JsonlSink(path, step_every_s=0)  # every step's line: each must be on disk before the checkpoint's
    records = OffThreadSinks([jsonl], interval=FOREVER).start()
    for event in steps(1, 20):
        records(event)
    records(ev.CheckpointSaved(step=20, path="ckpt/last.pt", kind="last"))
    # on disk now, not within the drainer's interval: the log's write-through, kept
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["type"] for r in lines[1:]] == ["step"] * 20 + ["checkpoint"]
    assert [r["step"] for r in lines[1:21]] == list(range(1, 21))
    records.close()


def test_events_from_many_threads_reach_every_sink_in_one_order():
    first, second = Recorder(), Recorder()
    records = OffThreadSinks([first, second], interval=0.005).start()

    def emit(offset: int) -> None:
        for event in steps(offset, offset + 199):
            records(event)

    workers = [threading.Thread(target=emit, args=(1 + 1000 * i,)) for i in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    records.close()
    assert len(first.events) == 800
    assert [id(e) for e in first.events] == [id(e) for e in second.events]
    for i in range(4):  # each thread's own events in the order it emitted them
        mine = [e.step for e in first.events if 1 + 1000 * i <= e.step <= 200 + 1000 * i]
        assert mine == sorted(mine) and len(mine) == 200


def test_a_full_queue_is_drained_by_the_emitting_thread():
    sink = Recorder()
    records = OffThreadSinks([sink], interval=FOREVER, max_queue=8).start()
    for event in steps(1, 7):
        records(event)
    assert sink.events == []
    records(steps(8, 8)[0])
    assert [e.step for e in sink.events] == list(range(1, 9))
    assert set(sink.threads) == {threading.current_thread().name}
    records.close()


def test_a_failing_sink_is_dropped_and_the_others_go_on(capsys):
    good = Recorder()

    def broken(event) -> None:
        raise RuntimeError("viewer gone")

    records = OffThreadSinks([broken, good], interval=FOREVER).start()
    for event in steps(1, 3):
        records(event)
    records.flush()
    assert [e.step for e in good.events] == [1, 2, 3]
    assert "viewer gone" in capsys.readouterr().err
    records.close()


def test_a_sink_that_emits_while_delivering_does_not_deadlock():
    seen = Recorder()
    records: OffThreadSinks

    def warns_once(event) -> None:  # like the log's full-disk warning, emitted from inside its own write
        if event.type == "step" and event.step == 2:
            records(ev.Warning(text="disk full"))

    records = OffThreadSinks([warns_once, seen], interval=FOREVER).start()
    for event in steps(1, 3):
        records(event)
    done = threading.Event()
    threading.Thread(target=lambda: (records.flush(), done.set()), daemon=True).start()
    assert done.wait(5), "flush deadlocked on a sink's own emit"
    assert [e.type for e in seen.events] == ["step", "step", "step", "warning"]
    records.close()


def test_close_delivers_what_is_queued_and_closes_the_sinks():
    sink = Recorder()
    records = OffThreadSinks([sink], interval=FOREVER).start()
    for event in steps(1, 5):
        records(event)
    records.close()
    assert [e.step for e in sink.events] == [1, 2, 3, 4, 5] and sink.closed
