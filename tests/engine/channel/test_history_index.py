"""events.index: a reopened log equals a fresh decode, and an index that does not match the log is never used."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from engine.run import events as ev
from engine.run import history
from engine.run.history import index as history_index


def _write(path: Path, steps: range, mode: str = "w", t0: float = 1.0) -> None:
    lines = [ev.to_json(ev.Schema(t=t0))] if mode == "w" else []
    for i in steps:
        lines.append(ev.to_json(ev.StepLogged(t=t0 + i, step=i, loss=1.0 / (i + 1), components={"mse": i * 0.5})))
        if i % 50 == 0:
            lines.append(ev.to_json(ev.EvalDone(t=t0 + i, step=i, val_loss=0.5, metrics={"val_loss": 0.5})))
    with open(path, mode) as out:
        out.write("\n".join(lines) + "\n")


def _expected(path: Path) -> list[str]:
    return [ev.to_json(e) for e in (ev.from_json(line) for line in path.read_text().splitlines()) if e is not None]


def _same(hist: history.History, path: Path) -> None:
    assert [ev.to_json(e) for e in hist] == _expected(path)
    steps = [e for e in (ev.from_json(line) for line in path.read_text().splitlines()) if isinstance(e, ev.StepLogged)]
    np.testing.assert_array_equal(hist.column("step", "loss"), [e.loss for e in steps])
    np.testing.assert_array_equal(hist.column("step", "components.mse"), [e.components["mse"] for e in steps])
    assert [e.type for e in hist.others("step")] == [e.type for e in hist if e.type != "step"]
    assert hist.offset == path.stat().st_size


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "events.jsonl"
    _write(path, range(1, 400))
    history_index.save(history.read_history(path, index=False))
    assert history_index.path_for(path).exists()
    return path


def test_reopen_reads_the_index_then_only_what_was_appended(log: Path) -> None:
    covered = log.stat().st_size
    _write(log, range(400, 450), mode="a")
    hist = history.read_history(log)
    assert hist.from_index == covered
    _same(hist, log)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "replaced", "shrunk"])
def test_an_index_that_does_not_match_is_ignored(log: Path, damage: str) -> None:
    index = history_index.path_for(log)
    if damage == "truncate":
        index.write_bytes(index.read_bytes()[: index.stat().st_size // 2])
    elif damage == "garbage":
        index.write_bytes(history_index.MAGIC + os.urandom(4000))
    elif damage == "empty":
        index.write_bytes(b"")
    elif damage == "replaced":  # a new run in the same directory: same size, other bytes
        _write(log, range(1, 400), t0=2.0)
    else:
        _write(log, range(1, 100))
    hist = history.read_history(log)
    assert hist.from_index == 0
    _same(hist, log)


def test_a_long_log_gets_an_index_written_beside_it(log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    history_index.path_for(log).unlink()
    monkeypatch.setattr(history_index, "MIN_INDEX_BYTES", 1)
    history.read_history(log)
    for thread in threading.enumerate():
        if thread.name == "events-index":
            thread.join(10)
    hist = history.read_history(log)
    assert hist.from_index == log.stat().st_size
    _same(hist, log)


def test_a_read_only_run_directory_reads_without_an_index(log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    history_index.path_for(log).unlink()
    monkeypatch.setattr(history_index, "MIN_INDEX_BYTES", 1)
    log.parent.chmod(0o555)
    try:
        history_index.save(history.read_history(log, index=False))  # must not raise
        assert not history_index.path_for(log).exists() or os.geteuid() == 0
        _same(history.read_history(log), log)
    finally:
        log.parent.chmod(0o755)


def test_many_lines_decode_as_each_line_would() -> None:
    """parse_lines (one msgspec call for the index's other events) equals parse_line line by line, odd lines too."""
    good = [ev.to_json(e).encode() for e in (ev.Warning(text="w", step=3), ev.EvalDone(step=4, val_loss=0.5),
                                              ev.SystemSampled(cpu_percent=1.0))]
    odd = [b'{"type":"eval","t":1.0,"step":5,"val_loss":NaN}', b'{"type":"nope","t":1.0}', b"[1, 2]",
           b'{"type":"warning"', b""]

    def same(lines: list[bytes]) -> None:
        def text(events):  # as JSON: NaN == NaN there
            return [None if e is None else ev.to_json(e) for e in events]
        assert text(history.parse_lines(lines)) == text(history.parse_line(line) for line in lines)

    same(good)
    for line in odd:  # each odd line sends the whole batch down the per-line path
        same([*good, line, good[0]])
    nan = history.parse_lines([odd[0]])[0]
    assert nan is not None and nan.val_loss != nan.val_loss


def test_a_tail_read_decodes_every_other_event_and_the_newest_steps(tmp_path: Path) -> None:
    """The first open of a long log without an index: the newest steps and every other event now, the rest later."""
    from bench.open_run import write_run

    path = write_run(tmp_path / "r", 16_000)
    assert path.stat().st_size >= history_index.MIN_INDEX_BYTES
    with open(path, "a") as out:
        out.write('{"type":"step","t":1.0,"st')  # a torn last line is left for the follower either way
    full = history.read_history(path, index=False)
    tail = history.read_history(path, tail_steps=5000)
    assert tail.steps_left_out == 11_000 and tail.count_type("step") == 5000 and tail.offset == full.offset
    for name in ("step", "loss", "t", "components.mse"):
        np.testing.assert_array_equal(tail.column("step", name), full.column("step", name)[-5000:])
    assert [ev.to_json(e) for e in tail.others("step")] == [ev.to_json(e) for e in full.others("step")]
    assert not history_index.path_for(path).exists(), "a tail read writes no index"
    rest = history.read_rest(tail)
    assert rest.steps_left_out == 0 and rest.offset == tail.offset
    np.testing.assert_array_equal(rest.column("step", "loss"), full.column("step", "loss"))
    for thread in threading.enumerate():
        if thread.name == "events-index":
            thread.join(30)
    assert history.read_history(path).from_index == tail.offset, "read_rest left the index for the next viewer"
    assert history.read_history(path, tail_steps=5000).steps_left_out == 0, "with an index there is no tail read"
    short = history.read_history(path, tail_steps=20_000, index=False)
    assert short.steps_left_out == 0 and short.count_type("step") == 16_000
