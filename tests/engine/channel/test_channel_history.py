"""The msgspec events.jsonl reader (step columns) equals decoding every line with events.from_json."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from engine.run import events as ev
from engine.run import history


def _mixed_lines(n: int, seed: int = 0) -> list[str]:
    """Step events of two shapes, rare variants, other types, garbage and torn lines, shuffled in bursts."""
    rng = random.Random(seed)
    lines = [ev.to_json(ev.Schema(t=1.0))]
    for i in range(n):
        roll = rng.random()
        comps = {"mse": rng.random()} if i < n // 2 else {"mse": rng.random(), "clip": -rng.random() * 1e-7}
        if roll < 0.80:
            lines.append(ev.to_json(ev.StepLogged(step=i, epoch=i // 100, loss=rng.random(), lr=1e-3,
                                                  grad_norm=rng.random() * 10, samples_per_s=3e3 * rng.random(),
                                                  steps_per_s=100.0, batch_size=32, components=comps)))
        elif roll < 0.82:  # non-finite loss, skipped: another skeleton (skipped true) and "nan" strings
            lines.append(ev.to_json(ev.StepLogged(step=i, loss=float("nan"), grad_norm=float("inf"),
                                                  lr=-0.0, skipped=True, components={"mse": float("-inf")})))
        elif roll < 0.90:
            lines.append(ev.to_json(ev.MemorySampled(step=i, allocated=i * 4096, peak=2 ** 40 + i,
                                                     capacity=None, breakdown={"params": i, "acts": 1.5},
                                                     source="torch", ratio=0.25)))
        elif roll < 0.93:
            lines.append(ev.to_json(ev.StateChanged(state="paused", reason=f"by request at 12:{i % 60:02d}",
                                                    step=i)))
        elif roll < 0.95:
            lines.append(ev.to_json(ev.SettingChanged(name="lr", old=i, new=i + 0.5, request_id=f"9-{i}")))
        elif roll < 0.96:
            lines.append('{"type":"step","t":1.0,"step":7,"epo')  # torn mid-file (a crash, then a resume)
        elif roll < 0.97:
            lines.append('{"type":"from_the_future","t":1.0,"step":3}')
        elif roll < 0.98:
            lines.append("not json at all: 1,2,3")
        elif roll < 0.99:
            lines.append("")
        else:  # a step written by a newer schema: an extra field, fields reordered
            lines.append(json.dumps({"type": "step", "step": i, "t": 2.0, "loss": 0.5, "new_field": [1, 2]},
                                    separators=(",", ":")))
    return lines


def _expected(lines: list[str]) -> list[ev.Event]:
    return [e for e in (ev.from_json(line) for line in lines) if e is not None]


@pytest.mark.parametrize("chunk_bytes", [1 << 20, 4096, 300])
def test_history_equals_from_json_line_by_line(tmp_path: Path, chunk_bytes: int) -> None:
    lines = _mixed_lines(3000)
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    hist = history.read_history(path, chunk_bytes=chunk_bytes)
    expected = _expected(lines)
    assert len(hist) == len(expected)
    got = list(hist)
    for i, (a, b) in enumerate(zip(got, expected)):
        # Compared as JSON: NaN != NaN as floats, but both write "nan".
        assert ev.to_json(a) == ev.to_json(b), f"event {i}: {a} != {b}"
        assert type(a) is type(b)
        assert a == b or ev.to_json(a).count("nan"), f"event {i}: equal unless NaN inside"
    assert hist.columnar > 0.7 * len(expected), "the step columns were used"
    assert hist.offset == path.stat().st_size
    # Events built from columns must not share mutable dicts.
    steps = [e for e in got if e.type == "step"]
    steps[0].components["mse"] = 123.0
    assert hist[got.index(steps[0])].components["mse"] != 123.0


def test_int_fields_stay_ints_and_special_floats_come_back(tmp_path: Path) -> None:
    lines = _mixed_lines(800, seed=3)
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    hist = history.read_history(path)
    assert hist.columnar
    for event in hist:
        if event.type == "step":
            assert type(event.step) is int and type(event.batch_size) is int
            if event.skipped:
                assert math.isnan(event.loss) and event.grad_norm == float("inf")
                assert event.components["mse"] == "-inf"  # as from_json leaves a nested non-finite value
        if event.type == "memory":
            assert type(event.peak) is int and event.peak > 2 ** 40 and event.capacity is None
    skipped = hist.column("step", "skipped")
    assert skipped.sum() == sum(1 for e in hist if e.type == "step" and e.skipped) > 0
    assert np.isnan(hist.column("step", "components.mse")[skipped == 1]).sum() == 0  # -inf, a number
    assert (hist.column("step", "components.mse")[skipped == 1] == -np.inf).all()


def test_columns_match_the_events(tmp_path: Path) -> None:
    lines = _mixed_lines(2000, seed=5)
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    hist = history.read_history(path, chunk_bytes=8192)
    steps = [e for e in _expected(lines) if e.type == "step"]
    assert hist.count_type("step") == len(steps)
    np.testing.assert_array_equal(hist.column("step", "step"), [e.step for e in steps])
    np.testing.assert_array_equal(hist.column("step", "loss"), [e.loss for e in steps])
    clip = [e.components.get("clip", float("nan")) for e in steps]
    np.testing.assert_array_equal(hist.column("step", "components.clip"), clip)


def test_torn_last_line_is_left_for_the_follower(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    whole = ev.to_json(ev.StepLogged(step=1, loss=0.5))
    torn = ev.to_json(ev.StepLogged(step=2, loss=0.25))
    path.write_bytes((whole + "\n" + torn[:40]).encode())
    hist = history.read_history(path)
    assert [e.step for e in hist] == [1]
    assert hist.offset == len(whole) + 1


def test_missing_file_is_an_empty_history(tmp_path: Path) -> None:
    hist = history.read_history(tmp_path / "nope.jsonl")
    assert len(hist) == 0 and hist.offset == 0 and list(hist) == []


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


def test_a_read_without_steps_has_every_other_event_and_counts_the_step_lines(tmp_path: Path) -> None:
    """What a viewer that reads the steps from the run's record asks for: no step line decoded, nothing else lost."""
    path = tmp_path / "events.jsonl"
    lines = _mixed_lines(3000, seed=4)
    path.write_text("\n".join(lines) + "\n" + '{"type":"step","t":1.0,"st')  # and a torn last line
    full = history.read_history(path)
    others = history.read_history(path, steps=False)
    assert others.count_type("step") == 0 and others.steps_left_out >= full.count_type("step") > 2000
    assert [ev.to_json(e) for e in others] == [ev.to_json(e) for e in full.others("step")]
    assert others.offset == full.offset < path.stat().st_size


@pytest.mark.parametrize("chunk_bytes", [1 << 20, 700])
def test_a_read_for_the_newest_samples_decodes_only_those_and_keeps_file_order(tmp_path: Path,
                                                                               chunk_bytes: int) -> None:
    """What a viewer keeps of the samples taken on a clock (the newest n of each type) is all it reads: the
    result is the whole history less the older samples, in file order, the others counted, never decoded."""
    path = tmp_path / "events.jsonl"
    lines = _mixed_lines(3000, seed=5)
    for i in range(0, len(lines), 97):  # system samples among them, and one line each kind cannot decode
        lines.insert(i, ev.to_json(ev.SystemSampled(t=float(i), cpu_percent=float(i))))
    lines.insert(len(lines) - 3, '{"type":"memory","t":1.0,"step":')
    path.write_text("\n".join(lines) + "\n")
    full = history.read_history(path, steps=False)
    memory = [e for e in full if e.type == "memory"]
    system = [e for e in full if e.type == "system"]
    assert len(memory) > 200 and len(system) > 30
    kept = memory[-49:] + system[-1:]  # the newest 50 memory lines hold the torn one
    expected = [ev.to_json(e) for e in full if e.type not in ("memory", "system") or any(e is k for k in kept)]
    newest = history.read_history(path, chunk_bytes=chunk_bytes, steps=False,
                                  newest={"memory": 50, "system": 1, "ranks": 1})
    assert [ev.to_json(e) for e in newest] == expected
    assert newest.samples_left_out == len(memory) + 1 - 50 + len(system) - 1
    assert newest.skipped == full.skipped and newest.offset == full.offset
    none = history.read_history(path, chunk_bytes=chunk_bytes, newest={"memory": 0, "system": 0})
    assert none.count_type("memory") == none.count_type("system") == 0
    assert none.count_type("step") == history.read_history(path).count_type("step")


@pytest.mark.parametrize("chunk_bytes", [1 << 20, 700])
def test_the_newest_samples_read_as_columns_hold_each_events_values_and_the_newest_stays_an_event(
        tmp_path: Path, chunk_bytes: int) -> None:
    """A viewer's memory ring reads the newest n memory samples as columns of the fields it draws (one struct
    decode, no event objects): each column equals the fields of the events a read of those n as events gives
    (null as NaN, a "nan" string as NaN, a torn line left out), and the newest good sample is still an event
    (the gauge shows it whole)."""
    path = tmp_path / "events.jsonl"
    lines = _mixed_lines(3000, seed=7)
    lines.insert(len(lines) - 5, '{"type":"memory","t":1.0,"step":')  # torn, among the newest
    lines.insert(len(lines) - 9, '{"type":"memory","t":2.0,"step":11,"peak":"nan","allocated":null}')
    lines.append('{"type":"memory","t":3.0,"step":')  # the newest memory line is torn: the one before is the event
    path.write_text("\n".join(lines) + "\n")
    names = ("step", "allocated", "peak", "reserved", "nvml_used")
    as_events = history.read_history(path, chunk_bytes=chunk_bytes, steps=False, newest={"memory": 60})
    as_columns = history.read_history(path, chunk_bytes=chunk_bytes, steps=False, newest={"memory": 60},
                                      columns={"memory": names})
    memory = [e for e in as_events if e.type == "memory"]
    assert len(memory) == 58  # 60 lines, two of them torn
    columns = as_columns.sample_columns["memory"]
    for name in names:
        want = np.array([np.nan if getattr(e, name) is None else getattr(e, name) for e in memory], np.float64)
        np.testing.assert_array_equal(columns[name], want)
    assert np.isnan(columns["peak"][memory.index(next(e for e in memory if e.step == 11))])
    assert [ev.to_json(e) for e in as_columns if e.type == "memory"] == [ev.to_json(memory[-1])]
    others = [ev.to_json(e) for e in as_events if e.type != "memory"]
    assert [ev.to_json(e) for e in as_columns if e.type != "memory"] == others
    assert as_columns.samples_left_out == as_events.samples_left_out + 60 - 1
    assert as_columns.skipped == as_events.skipped and as_columns.offset == as_events.offset


def test_sample_lines_decode_into_their_class_exactly_as_each_line_would() -> None:
    """The newest samples a viewer reads decode straight into their class; any value the class's types do not
    take exactly (a "nan" string, a torn line, a newer schema's extra field) gives what parse_line gives."""
    memory = [ev.to_json(ev.MemorySampled(t=1.0 + i, step=100 * i, peak=2 ** 40 + i, capacity=None, ratio=0.25,
                                          breakdown={"params": i, "acts": 1.5, "odd": "nan"}, source="torch"))
              for i in range(50)]
    system = [ev.to_json(ev.SystemSampled(t=float(i), cpu_percent=i * 1.5)) for i in range(20)]
    ranks = [ev.to_json(ev.RanksSampled(t=2.0))]
    odd = ['{"type":"memory","t":1.0,"step":3,"ratio":"nan"}', '{"type":"memory","t":1.0,"step":',
           '{"type":"memory","t":1.0,"step":4,"from_a_newer_schema":[1]}', '{"type":"memory","t":1,"step":5}']

    def same(lines: list[str], kind: str) -> None:
        encoded = [line.encode() for line in lines]
        got, each = history.parse_lines_of(encoded, kind), [history.parse_line(line) for line in encoded]
        assert [type(e) for e in got] == [type(e) for e in each]
        # equal as events (an integer time read as the float it is declared: 1 == 1.0), as JSON where NaN is in
        assert all(a == b or ev.to_json(a) == ev.to_json(b) for a, b in zip(got, each)), (got, each)

    same(memory, "memory")
    same(system, "system")
    same(ranks, "ranks")
    for line in odd:
        same([*memory[:3], line, memory[3]], "memory")
