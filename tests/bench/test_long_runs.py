"""bench.long_runs' parts that need no viewer: the runs it writes, the lag and frame arithmetic, the load sampler,
and the page section built from given results. (The whole section at its smoke size, with the real viewer, runs
in tests/bench/test_bench_smoke.py.)"""

from __future__ import annotations

import json
import re
import time
from collections import Counter

import numpy as np
import pytest

from bench.common import LoadSampler
from bench.long_runs import Plan, generate, section
from bench.long_runs.probes import lag_series
from bench.long_runs.viewer import conversion_bar, full_frame, key_frame_s, shown_step
from engine.run.history import read_history
from engine.run.steps import open_record, read_steps
from tests.conftest import wait_until

pytestmark = pytest.mark.timeout(120)


def test_a_record_run_holds_every_step_with_the_engines_metrics_and_an_engines_log(tmp_path):
    steps = 3000
    run = generate.write_record_run(tmp_path / "r", steps)
    record = open_record(run)
    assert (record.rows, record.first_step, record.last_step) == (steps, 1, steps)
    assert set(record.names()) == {"t", "epoch", "loss", "lr", "grad_norm", "samples_per_s", "steps_per_s",
                                   "batch_size", "skipped", "tokens_per_s", "mfu", "components.mse"}
    table = read_steps(run)
    step, cols = generate.columns(0, steps, steps)
    assert (table["step"] == step).all()
    assert np.allclose(table["loss"], cols["loss"], rtol=1e-6) and (table["components.mse"] == table["loss"]).all()
    history = read_history(run / "events.jsonl")
    kinds = Counter(event.type for event in history)
    # a step line a second of the run's clock (and the last), memory every 0.5 s (500 steps), system every 2 s
    assert kinds["step"] == steps // int(generate.RATE * generate.STEP_LINE_S) + 1
    assert kinds["memory"] == steps // 500 and kinds["system"] == steps // 2000
    assert kinds["run_started"] == kinds["run_finished"] == 1
    lines = [event for event in history if event.type == "step"]
    assert lines[-1].step == steps and lines[-1].loss == pytest.approx(float(cols["loss"][-1]))
    assert json.loads((run / "status.json").read_text())["state"] == "finished"
    assert generate.disk_bytes(run / "steps") / steps < 100


def test_the_lag_is_the_time_since_the_shown_step_reached_the_record():
    # the record grows 1,000 steps a second from t = 1 s; the screen shows the step written 0.5 s before
    written = [(1 + t / 20, 1000 + 50 * t) for t in range(200)]
    screens = [(2 + t / 4, 1000 + 250 * t + 500) for t in range(30)]
    assert lag_series(written, screens) == pytest.approx([0.5] * 30)
    # as new as the record: 0; no step on screen, or one the record had before it was watched: left out
    assert lag_series(written, [(5.0, 5000), (5.0, None), (5.0, 999)]) == [0.0]


def test_a_keys_frame_time_ends_with_the_burst_of_updates_that_answered_it():
    sent = 100.0
    log = [(99.9, 0.01), (100.03, 0.02), (100.06, 0.02), (100.5, 0.01), (101.2, 0.01)]
    assert key_frame_s(log, sent, 101.0) == pytest.approx(0.06)  # 100.03, then one that began 0.01 s after it
    assert key_frame_s(log, 101.1, float("inf")) == pytest.approx(0.1)
    assert key_frame_s(log, 102.0, float("inf")) is None


def test_the_screen_parsers_read_the_progress_panel_and_the_charts():
    screen = "│ step 1000000/1000000  100.0% │\n" + "⣿⡇⢸" * 10
    assert shown_step(screen) == 1_000_000 and full_frame(screen, 1_000_000)
    assert not full_frame(screen, 999_999) and not full_frame("│ step 5/5 │", 5)  # no chart drawn yet
    assert shown_step("waiting for data") is None
    assert conversion_bar("│ x\n converting the old log into a step record ████████░░░░░░░░░░░░ 42%   \n")
    assert not conversion_bar(" loss · EMA 0.97 · last 1000 (converting 42%)\n")  # the chart's title: no bar


def test_the_load_sampler_samples_through_a_phase_and_splits_by_mark():
    with LoadSampler(interval=0.02) as load:
        load.mark("a")
        wait_until(lambda: len(load.values("a")) >= 3, 10, "three samples in phase a", 0.01)
        load.mark("b")
        wait_until(lambda: len(load.values("b")) >= 3, 10, "three samples in phase b", 0.01)
    assert len(load.values("a")) >= 3 and len(load.values("b")) >= 3
    assert len(load.values()) >= len(load.values("a")) + len(load.values("b"))
    assert load.summary().startswith("load average ") and "samples 0.02 s apart" in load.summary()


def _open(first, peak, capped=None, keys=()):
    return {"first_s": first, "cpu_s": first and first / 2, "steady_mib": peak and peak - 5, "peak_mib": peak,
            "capped_at": capped, "keys": list(keys)}


def test_the_section_gives_every_goal_line_and_says_why_a_frame_is_missing():
    load = LoadSampler(interval=0.01).start()
    for phase in ("size 100000000", "old", "names 1000", "names 10000", "soak", "fast"):
        load.mark(phase)
        time.sleep(0.03)
    load.stop()
    live = {"first_s": 1.0, "rss": [120.0] * 20, "samples": [(1.0 + i, 100.0 + i / 9) for i in range(200)],
            "peak_mib": 150.0, "capped_at": None, "rate": 1050.0, "lags": [0.2, 0.4, 1.3], "lag_samples": 3,
            "followed": 1_000_300}
    sized = {"write_s": 90.0, "record_b": 6.2e9, "events_b": 3.4e8, "dir_b": 6.6e9, "cached_b": 1e9,
             "finished": {"opens": [_open(1.2, 140.0, keys=[("+", 0.04), ("Left", None)])],
                          "keys": [("+", 0.04), ("Left", None)], "zoom": True}, "reads": [0.01, 0.02], "live": live}
    results = {"reads_record": True, "zoom": True, "sizes": {100_000_000: sized},
               "old": {"log_b": 2.6e9, "direct": {"wall_s": 30.0, "cpu_s": 20.0, "calls": 160, "peak_mib": 180.0},
                       "viewer": {"first_s": 0.9, "full_s": 25.0, "converted_s": 31.0, "bar_screens": 200,
                                  "converts": True, "steady_mib": 150.0, "peak_mib": 200.0, "capped_at": None}},
               "names": {1000: {"log_b": 6.5e5, "dir_b": 1.2e7, "open": {"opens": [_open(0.8, 110.0)]}},
                         10_000: {"log_b": 6.4e6, "dir_b": 1.2e8,
                                  "open": {"opens": [_open(None, 5200.0, capped=41.0)]}}},
               "soak": live, "fast": {"ratios": [0.96, 0.97], "bare": [1000.0, 990.0], "steps": 2000, "rounds": 2}}
    built = section.build(results, Plan(), load, "python -m bench --only long_runs")
    text = "\n".join(built.verdicts)
    assert "first full frame, 100,000,000 steps (wall, fresh process): 1.2 s — goal ≤ 1.5 s met" in text
    assert "viewer peak RSS, live run of 100,000,000 steps: 150 MiB — goal ≤ 300 MiB met" in text
    assert "step record bytes a step (100,000,000 steps, default metrics): 62 B — goal ≤ 64 B met" in text
    assert "run directory of 100M steps, checkpoints aside: 6.6 GB — goal ≤ 8 GB met" in text
    assert "zoom and pan frame, 100,000,000 steps, median of 1 keys: 40 ms — goal ≤ 100 ms met" in text
    assert ("first full frame, 10,000 metric names (wall): no frame: viewer killed past the RSS cap after 41 s — "
            "goal ≤ 2 s MISSED") in text
    assert "live soak, the dashboard's lag behind the writer (max): 1.3 s — goal ≤ 1 s MISSED" in text
    assert "live soak, steps the dashboard followed: 1e+06 — goal ≥ 1e+06 met" in text
    assert "live soak of 1,000,000 steps, viewer RSS growth: 17.8 MiB — goal ≤ 16 MiB MISSED" in text
    assert "fast steps, engine ÷ bare loop steps/s (with the step record): 0.965 — goal ≥ 0.95 met" in text
    assert "the old run's conversion shows a progress bar in the viewer (screens): 200 — goal ≥ 1 met" in text
    assert "1.0 GB of 6.6 GB (**not all**)" in built.body  # the run did not fit in the page cache
    assert "(1 keys: no frame)" in built.body and "the record complete 31.0 s" in built.body
    load_cell = r"\| [\d.]+ \([\d.]+–[\d.]+\) \|$"  # the load through the size's phase, beside its zoom and live rows
    assert re.search(r"^\| 100,000,000 \| \+ Left \| .*" + load_cell, built.body, re.M), built.body
    assert re.search(r"^\| 100,000,000 \| 1,050 \| .*" + load_cell, built.body, re.M), built.body


def _sampled(phases: dict[str, list[float]]) -> LoadSampler:
    """A stopped sampler whose phases (marked in order, each lasting 1 ms of the monotonic clock) hold the given
    load averages."""
    load = LoadSampler(interval=0.01)
    for name, values in phases.items():
        load.mark(name)
        load.samples += [(time.monotonic(), value) for value in values]
        time.sleep(0.001)
    load.mark("end")
    return load


def test_a_section_measured_in_parts_is_built_from_every_part_and_a_part_measured_again_replaces_its_own(tmp_path):
    from bench.long_runs import saved

    store = tmp_path / "long-runs.json"
    sized = {"write_s": 9.0, "record_b": 6.2e7, "events_b": 3.4e6, "dir_b": 6.6e7, "cached_b": None,
             "finished": {"opens": [_open(0.9, 90.0, keys=[("+", 0.03)])], "keys": [("+", 0.03)], "zoom": True},
             "reads": [0.01], "live": {"rss": [95.0], "peak_mib": 99.0, "capped_at": None, "rate": 1100.0,
                                       "lags": [0.3], "first_s": 1.0, "asked_rate": 900.0, "seconds": 20.0}}
    first = {"reads_record": True, "zoom": True, "sizes": {1_000_000: sized}, "names": {},
             "fast": {"ratios": [0.97], "bare": [1000.0], "steps": 2000, "rounds": 1}}
    saved.record(store, ("sizes", "fast"), first, _sampled({"size 1000000": [2.0, 2.0], "fast": [3.0]}), "a")
    soak = {"first_s": 1.0, "samples": [(1.0 + i, 100.0) for i in range(40)], "peak_mib": 101.0, "capped_at": None,
            "rate": 1090.0, "lags": [0.2, 0.5], "lag_samples": 2, "followed": 6000, "asked": 6000, "asked_rate": 1100.0}
    results, load, commands = saved.record(store, ("soak",), {**first, "sizes": {}, "soak": soak},
                                           _sampled({"soak": [5.0, 7.0]}), "b")
    assert commands == ["a", "b"] and set(results["sizes"]) == {1_000_000} and results["soak"]["followed"] == 6000
    assert load.values("size 1000000") == [2.0, 2.0] and load.values("soak") == [5.0, 7.0]
    built = section.build(results, Plan(), load, " && ".join(commands))
    text = "\n".join(built.verdicts)
    assert "first full frame, 1,000,000 steps (wall, fresh process): 0.9 s" in text
    assert "a writer appending at 900 steps/s through the engine's sinks for 20 s" in built.body  # that part's plan
    assert "live soak of 6,000 steps, viewer RSS growth: 0 MiB — goal ≤ 16 MiB met" in text
    assert "fast steps, engine ÷ bare loop steps/s (with the step record): 0.97" in text
    # the fast steps again, alone: their results and their load are the new run's; the others' stay
    again = {**first, "sizes": {}, "fast": {**first["fast"], "ratios": [0.5]}}
    results, load, commands = saved.record(store, ("fast",), again, _sampled({"fast": [9.0]}), "c")
    assert commands == ["a", "b", "c"] and results["fast"]["ratios"] == [0.5] and load.values("fast") == [9.0]
    assert set(results["sizes"]) == {1_000_000} and load.values("size 1000000") == [2.0, 2.0]


def test_a_part_not_measured_is_named_on_the_page_and_has_no_goal_line():
    load = _sampled({"soak": [1.0]})
    soak = {"first_s": 1.0, "samples": [(1.0 + i, 100.0) for i in range(40)], "peak_mib": 101.0, "capped_at": None,
            "rate": 1090.0, "lags": [0.2], "lag_samples": 1, "followed": 6000, "asked": 6000, "asked_rate": 1100.0}
    built = section.build({"reads_record": True, "zoom": True, "sizes": {}, "names": {}, "soak": soak}, Plan(), load,
                          "python -m bench.long_runs --parts soak")
    for part in ("Runs of 1M to 100M steps", "An old run", "Many metric names"):
        assert f"- **{part}**: not measured in this run." in built.body
    assert "**Finished runs**" not in built.body
    assert all("live soak" in v for v in built.verdicts) and len(built.verdicts) == 4, built.verdicts


def test_an_unknown_part_is_one_line_and_exit_2(capsys):
    from bench.long_runs import main

    with pytest.raises(SystemExit) as exited:
        main(["--parts", "sizes,soaks"])
    assert exited.value.code == 2
    assert "--parts: soaks: not a part; the parts are sizes,old,names,soak,fast" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["--parts", "soak", "--rate", "0"])
    assert exited.value.code == 2 and "--rate 0: must be > 0 (steps a second)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:  # the page's section would lose the other parts
        main(["--parts", "soak", "--write"])
    assert exited.value.code == 2 and "--write with --parts needs --results FILE" in capsys.readouterr().err
