"""The viewer's cost is set by the screen, not by the run: what it holds does not grow with the run's length, a
thousand metric names are listed without reading a value, and a live run is followed by reading what was appended.
"""

from __future__ import annotations

import gc
import json
import os
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from engine.run import events as ev
from engine.run.control.client import RunClient
from engine.run.sinks import JsonlSink
from engine.run.steps import StepWriter, open_record
from tui.model.chart_view import RECENT_STEPS, warm_up
from tui.model.dashboard import RunModel
from tui.model.ema import LEVELS
from tui.model.step_source import RecordSteps
from tui.widgets.metric_chart import MetricChart

FIELDS = ("loss", "lr", "grad_norm", "samples_per_s", "steps_per_s")


def _record(path: Path, steps: int, extra: dict | None = None) -> Path:
    rng = np.random.default_rng(0)
    at = np.arange(1, steps + 1)
    columns = {name: rng.random(steps).astype(np.float32) for name in FIELDS}
    columns["t"] = 1.7e9 + at * 0.01
    writer = StepWriter(path / "steps")
    writer.append_columns(at, {**columns, **(extra or {})})
    writer.close()
    return path


def _frames(model: RunModel) -> list[str]:
    """What the dashboard's four charts draw, in the recent window, the full history and zoomed in."""
    out = []
    for metric in ("loss", None, "grad_norm", "lr"):
        chart = MetricChart.detached(model, metric)
        out.append(chart.build(78, 16).plain)
        chart.toggle_window()
        out.append(chart.build(78, 16).plain)
        chart.zoom(model, 0.01)
        out.append(chart.build(78, 16).plain)
    return out


def _held_after_frames(path: Path) -> tuple[int, int, list[str]]:
    """(bytes the model holds, peak bytes while opening and drawing, the frames) by tracemalloc (numpy reports its
    buffers to it; the record's mapped pages are the page cache's, not the viewer's heap)."""
    gc.collect()
    tracemalloc.start()
    model = RunModel()
    model.open_steps(RecordSteps(open_record(path)))
    frames = _frames(model)
    gc.collect()
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert model.step_count > 0
    return held, peak, frames


@pytest.mark.slow
def test_what_the_viewer_holds_does_not_grow_from_10k_to_1m_steps(tmp_path):
    _held_after_frames(_record(tmp_path / "first", 2_000))  # what the first frames of a process cache (imports…)
    small = _held_after_frames(_record(tmp_path / "small", 10_000))
    big = _held_after_frames(_record(tmp_path / "big", 1_000_000))
    assert all("⣿" in frame or "⣀" in frame or "⠉" in frame for frame in big[2][:2]), "the charts drew the run"
    assert abs(big[0] - small[0]) < 256 << 10, (small[0], big[0])  # 100× the steps, within 256 KiB
    assert big[1] < 8 << 20, big[1]  # no frame reads more than the screen needs (1M float32 would be 4 MiB)


def _open_series(directory: Path) -> set[str]:
    """Names of the record's series whose files this process has open (/proc/self/fd): what a reader read."""
    catalog = {}
    for line in (directory / "steps" / "catalog.jsonl").read_text().splitlines()[1:]:
        entry = json.loads(line)
        catalog[str(entry["id"])] = entry["name"]
    names = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
        if path.parent == directory / "steps" and path.stem in catalog:
            names.add(catalog[path.stem])
    return names


def test_a_thousand_metric_names_are_listed_without_reading_their_values(tmp_path):
    names = {f"components.layer{i}.grad" for i in range(1000)}
    run = _record(tmp_path / "wide", 300, {name: np.full(300, 0.5, np.float32) for name in names})
    model = RunModel()
    model.open_steps(RecordSteps(open_record(run)))
    listed = model.train_names()
    assert len(listed) == 1000 + len(FIELDS) and listed[0] == "loss"
    assert {c.name for c in model.choices()} >= {f"layer{i}.grad" for i in range(1000)}
    _frames(model)
    opened = _open_series(run)
    assert opened and not opened & names, sorted(opened & names)[:5]
    MetricChart.detached(model, "layer7.grad").build(78, 16)  # a chart that shows one reads that one only
    assert _open_series(run) & names == {"components.layer7.grad"}


def _rchar() -> int:
    return int(next(line for line in Path(f"/proc/{os.getpid()}/io").read_text().splitlines()
                    if line.startswith("rchar")).split()[1])


def test_a_live_run_is_followed_by_reading_what_was_appended(tmp_path):
    """The log: poll reads the bytes appended, never the log again; the record: refresh reads its appended
    catalogue and commit count, and a frame reads the window it smooths, however long the run."""
    run = tmp_path / "live"
    rng = np.random.default_rng(1)
    writer = StepWriter(run / "steps")
    at = np.arange(1, 200_001)
    writer.append_columns(at, {"loss": rng.random(len(at)), "t": 1.7e9 + at * 0.01})
    writer.flush()
    log = JsonlSink(run / "events.jsonl")
    log(ev.RunStarted(name="live", total_steps=10**6))
    for step in range(1, 200_001, 1000):  # step lines at a cadence, as the engine keeps them
        log(ev.StepLogged(step=step, loss=0.5, t=1.7e9 + step * 0.01))
    log.close()
    client = RunClient(run, read_only=True)
    model = RunModel()
    model.open_steps(RecordSteps(open_record(run)))
    model.ingest(client.history(steps=False))
    chart = MetricChart.detached(model, "loss")
    chart.build(78, 16)
    size = (run / "events.jsonl").stat().st_size
    for k in range(5):  # the run goes on: rows into the record, an eval and a step line into the log
        first = 200_001 + 1000 * k
        new = np.arange(first, first + 1000)
        writer.append_columns(new, {"loss": rng.random(1000), "t": 1.7e9 + new * 0.01})
        writer.flush()
        with open(run / "events.jsonl", "a") as out:  # as the engine's log sink appends them
            out.write(ev.to_json(ev.EvalDone(step=int(new[-1]), val_loss=0.4)) + "\n")
            out.write(ev.to_json(ev.StepLogged(step=int(new[-1]), loss=0.5, t=1.7e9)) + "\n")
        appended = (run / "events.jsonl").stat().st_size - size
        size += appended
        before = _rchar()
        polled = client.poll(timeout=1.0)
        assert _rchar() - before <= appended + 4096, "the log: only the appended bytes were read"
        assert [e.type for e in polled] == ["eval"], "step lines are left to the record"
        model.ingest(polled)
        before = _rchar()
        assert model.refresh_steps() and model.step == new[-1]
        assert _rchar() - before <= 16 << 10, "the record: its commit count, new names and newest rows (the pace)"
        before, values_before = _rchar(), model.steps.values_read
        chart.update_from(model)
        chart.build(78, 16)
        assert model.steps.values_read - values_before <= RECENT_STEPS + warm_up(LEVELS[chart.smoothing]) + 64
        assert _rchar() - before < 1 << 20, "a frame reads what it draws (the record holds 1.6 MiB of steps alone)"
    writer.close()
    client.close()



def _drawn_by_the_other_viewers(run: Path, steps: int, short: RunModel) -> dict[str, int]:
    """Bytes `plot`, `runs`' trend and the compare overlay read of a finished run of ``steps`` steps (its log the
    same 300 lines whatever its length: what grows is its record)."""
    from tui.commands.plot import draw
    from tui.model.compare import read_run
    from tui.model.trend import trend

    log = JsonlSink(run / "events.jsonl")
    log(ev.RunStarted(t=1.7e9, name=run.name, total_steps=steps))
    for k in range(1, 301):  # step lines at a cadence, an eval now and then
        log(ev.StepLogged(step=k * steps // 300, loss=99.0, t=1.7e9 + k))
        if k % 30 == 0:
            log(ev.EvalDone(step=k * steps // 300, val_loss=1.0 / k, t=1.7e9 + k))
    log(ev.RunFinished(steps=steps, t=1.7e9 + 400))
    log.close()
    read = {}
    before = _rchar()
    chart = draw([run], "loss", 100, 25)
    read["plot"] = _rchar() - before
    assert not chart.left_out and "99" not in chart.text.split("\n")[0], "the loss from the record"
    before = _rchar()
    found = trend(run)
    read["runs"] = _rchar() - before
    assert found.metric == "val_loss" and len(found.values) == 10
    before = _rchar()
    short.set_compare(read_run(run))
    overlay = MetricChart.detached(short, "loss")
    overlay.toggle_window()
    overlay.build(78, 16)
    read["compare"] = _rchar() - before
    assert short.compare.step_count == steps and short.compare.steps.last_step == steps
    return read


def test_plot_runs_and_the_compare_overlay_read_the_same_of_a_100k_and_a_1m_step_run(tmp_path):
    """What they draw is set by the chart's columns, so 10× the steps read the same: the pyramid's blocks and a
    few slabs of the step file per column (1M steps: 4 MiB of loss alone; a column read whole would show)."""
    short = RunModel()
    short.open_steps(RecordSteps(open_record(_record(tmp_path / "short", 2_000))))
    _drawn_by_the_other_viewers(_record(tmp_path / "warm", 2_000), 2_000, short)  # a process's first reads
    small = _drawn_by_the_other_viewers(_record(tmp_path / "small", 100_000), 100_000, short)
    big = _drawn_by_the_other_viewers(_record(tmp_path / "big", 1_000_000), 1_000_000, short)
    for viewer in small:  # (the step file's coarse index, read once: 8 bytes per 512 steps, 14 KiB more at 1M)
        assert big[viewer] - small[viewer] < 64 << 10, (viewer, small, big)
        assert big[viewer] < 2 << 20, (viewer, big)
