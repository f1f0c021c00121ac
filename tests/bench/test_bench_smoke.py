"""The benchmark suite still executes: cheap modules at their smoke size, the costly ones' pure parts.

No timing is asserted anywhere (the numbers of a smoke run mean nothing);
`python -m bench --quick` is never run here. The dashboard, attach and
memory-truth benches launch apps or real training for minutes, so only their
helpers and their table-building code (fed synthetic measurements) run here.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import shutil
import sys
import time

import pytest

from bench import __main__ as suite
from bench import page as results_page
from bench.common import Section

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _smoke(monkeypatch):
    monkeypatch.setenv("BENCH_SMOKE", "1")


def test_every_module_has_run():
    for name in suite.MODULES:
        module = importlib.import_module(name)
        assert callable(getattr(module, "run", None)), name


def test_cheap_modules_run_and_the_page_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(results_page, "ROOT", tmp_path)
    code = suite.main(["--only", "plot_render", "open_run", "startup", "step_record_formats"])
    page = (tmp_path / "docs" / "BENCHMARKS.md").read_text()
    assert code == 0, page
    for title in ("Loss-plot frame time", "Channel: opening a long run", "Start-up", "Step record formats"):
        assert f"## {title}" in page
    assert "crashed" not in page
    # the formats' tables (smoke: the record and sqlite at 20,000 steps): every cell measured, the lines run
    record = re.search(r"\| this record \(arrays \+ pyramid\) \| [\d.]+ \| [\d.]+ \| [\d.]+ \| \d+ \| ([\d,]+) rows; "
                       r"pandas line: yes \(\1 rows\) \| yes \(2,000 rows\) \| yes \(2,000 rows\) \| no \|", page)
    assert record and int(record.group(1).replace(",", "")) > 0, page
    assert re.search(r"\| sqlite \(WAL\) \| [\d.]+ \| [\d.]+ \| [\d.]+ \| \d+ \| not tried in this run \| "
                     r"yes \(2,000 rows\) \| yes \(2,000 rows\) \| no \|", page), page
    sized = re.search(r"\| this record \(arrays \+ pyramid\) \| [\d.]+ \| ([\d.]+) \| [\d.]+ \| [\d.]+ \(1,872\) \|",
                      page)  # 156 blocks of level 7 in each of 12 series
    assert sized and 57 <= float(sized.group(1)) < 70, page  # the default metrics' 57 B a step, and the pyramid
    assert re.search(r"\| sqlite \(WAL\) \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \(1,872\) \|", page), page


def test_attention_smoke_and_seed_baseline_is_exact():
    import torch

    from bench import attention
    from engine.tasks.sensorlm.model import attention as model_attention

    q, k, v = (torch.randn(1, 2, 10, 4) for _ in range(3))
    assert torch.allclose(attention.seed_attention(q, k, v, chunk=3), model_attention(q, k, v, "math", chunk=3),
                          atol=1e-6)
    section = attention.run()
    assert "seed (chunks, no recompute)" in section.body and section.skipped is None


def test_run_events_window_and_rate(tmp_path):
    from bench.run_events import EventsFile, steps_per_s, window

    path = tmp_path / "events.jsonl"
    lines = [json.dumps({"type": "step", "step": s, "t": 100.0 + 0.5 * s}) for s in range(1, 21)]
    path.write_text("\n".join(lines) + "\n" + '{"type":"run_fini')  # a torn last line waits for its end
    events = EventsFile(path)
    events.read()
    assert events.last_step() == 20 and not events.finished
    with open(path, "a") as out:
        out.write('shed","status":"finished"}\n')
    events.read()
    assert events.finished
    lo, hi = window(20, 0.15, 0.7)
    assert (lo, hi) == (3, 14)
    assert steps_per_s(events.steps, lo, hi) == pytest.approx(2.0)


def test_pty_process_counts_bytes_and_sees_keys():
    from bench.pty_run import PtyProcess

    term = PtyProcess([sys.executable, "-c", "import sys; print('ready', flush=True); "
                                             "print('got', sys.stdin.readline().strip(), flush=True)"], size=(80, 24))
    assert term.wait_for(b"ready", timeout=30) is not None
    since = term.mark()
    sent = term.send(b"xyz\r")
    seen = term.wait_for(b"got xyz", since, timeout=30)
    assert term.close(timeout=30) == 0
    assert seen is not None and seen >= sent
    assert term.bytes_between(0, float("inf")) == len(term.output) > 0


def test_pty_wait_finds_output_that_came_just_as_the_process_ended():
    """The reader may take the last bytes and end between a look at the output and a look at the process: the
    wait must still find them (it gave None on a loaded CI box, with the answer in the output)."""
    from bench.pty_run import PtyProcess

    term = PtyProcess([sys.executable, "-c", "print('ready', flush=True)"], size=(80, 24))
    assert term.close(timeout=30) == 0  # its reader has ended (close joins it)

    class EndsAsItIsAsked:
        """The process as the race leaves it: asking whether it ended is when the reader's last chunk lands."""

        def poll(self):
            if b"late" not in term.output:  # no lock needed: the reader thread has ended
                term.chunks.append((time.time(), 4))
                term.output += b"late"
            return 0

    term.proc = EndsAsItIsAsked()
    assert term.wait_for(b"late", timeout=5) is not None


def test_dashboard_overhead_table(monkeypatch):
    from bench import dashboard_overhead as dash

    def runs(steps, rounds, presses, with_process_runs):
        row = {"steps_per_s": 9.0, "kbps": 4.5, "ui_cpu": 60.0, "keys_ms": [50.0], "frames_ms": [20.0], "fps": 1.0}
        return {dash.HEADLESS: [{"steps_per_s": 10.0}], dash.IN_PROCESS: [row]}

    def slices(pairs, slice_s, warm_s, presses):
        return {"bare": [10.0, 10.0], "viewer": [9.9, 10.0], "kbps": [4.0, 4.2], "ui_cpu": [5.0, 5.0],
                "fps": [1.0, 1.0], "frames_ms": [20.0, 30.0], "keys_ms": [40.0]}

    monkeypatch.setattr(dash, "measure", runs)
    monkeypatch.setattr(dash, "measure_slices", slices)
    section = dash.run()
    assert isinstance(section, Section)
    text = "\n".join(section.verdicts)
    assert "with ÷ without the dashboard (slices; dashboard issue): 0.995 — goal ≥ 0.99 met; run-to-run spread " \
           "0.990–1.000 over 2 slice pairs" in text
    assert "--in-process ÷ headless steps/s (runs): 0.9 — goal ≥ 0.95 MISSED" in text
    assert "| slices of one run | engine + dashboard attached (process mode) | 9.95" in section.body


def test_viewer_slice_rate():
    from bench.viewer_slices import rate_between

    steps = [(s, 100.0 + 0.25 * s) for s in range(100)]
    assert rate_between(steps, 105.0, 110.0) == pytest.approx(4.0)
    assert rate_between(steps, 200.0, 201.0) != rate_between(steps, 200.0, 201.0)  # NaN: no steps inside


def test_startup_table(monkeypatch):
    from bench import startup

    monkeypatch.setattr(startup, "help_times", lambda repeats, with_torch=True: {
        "sensorlm-tui --help": [(0.3, 0.2)], "python -c pass": [(0.05, 0.03)]})
    monkeypatch.setattr(startup, "first_frame", lambda in_process, root: {
        "frame": 0.6, "phase": 0.8 if in_process else 1.2, "torch_start": 0.5, "torch_end": 1.5})
    monkeypatch.setenv("BENCH_SMOKE", "0")
    section = startup.run(quick=True)
    assert "first frame ÷ torch import done (engine process): 0.4× (worst) — goal ≤ 1× (worst) met" in section.verdicts
    assert any(v.startswith("launch → first phase on screen (--in-process): 0.8 s (worst) — goal ≤ 1 s (worst) met")
               for v in section.verdicts), section.verdicts
    assert any(v.startswith("launch → first phase on screen (engine process): 1.2 s") and "MISSED" in v
               for v in section.verdicts), section.verdicts


@pytest.mark.slow
def test_demo_learning_reads_the_runs_evals_back():
    from bench import demo_learning

    section = demo_learning.run(quick=True)  # smoke: 2 real training steps of the demo, seed 0
    rows = [line for line in section.body.splitlines() if line.startswith("| 0 |")]
    assert len(rows) == 1 and "| 2 |" in rows[0], section.body  # the last eval is at step 2
    assert len(section.verdicts) == 3 and all("goal" in v for v in section.verdicts), section.verdicts


def test_fast_overhead_smoke_runs_the_engine_and_the_bare_loop():
    from bench import engine_overhead_fast

    section = engine_overhead_fast.run()  # smoke: 40 steps each, one round, no viewer slices
    assert "| engine, defaults" in section.body and "steps per CPU-second" in section.body
    assert any(v.startswith("fast steps: engine ÷ bare loop steps/s") for v in section.verdicts)


def test_fast_overhead_table_with_slices():
    from bench import engine_overhead_fast

    row = lambda rate, cpu: {"steps_per_s": rate, "cpu_us": cpu}  # noqa: E731
    results = {"bare": [row(1000.0, 900.0), row(1100.0, 880.0)], "engine": [row(960.0, 950.0), row(1045.0, 930.0)],
               "read_rate": 150000.0, "read_steps": 4000}
    slices = {"bare": [900.0] * 5, "viewer": [891.0] * 5}
    section = engine_overhead_fast.section(results, slices, 4000, 2, quick=False)
    text = "\n".join(section.verdicts)
    assert "engine ÷ bare loop steps/s (toy, default logging): 0.955 — goal ≥ 0.95 met" in text
    assert ("dashboard attached ÷ alone steps/s (slices): 0.99 — goal ≥ 0.95 met; spread 0.990–0.990 over 5 pairs"
            in text)
    assert "viewer read rate ÷ engine write rate: 150 — goal ≥ 1 met" in text


def test_fast_overhead_rows_of_the_lora_lm_the_deferred_readback_and_the_host_syncs():
    from bench import engine_overhead_fast

    row = lambda rate: {"steps_per_s": rate, "cpu_us": 1e6 / rate}  # noqa: E731
    results = {"bare": [row(1000.0)] * 2, "engine": [row(960.0)] * 2, "engine_deferred": [row(940.0)] * 2,
               "bare_lm": [row(500.0)] * 2, "engine_lm": [row(490.0)] * 2, "read_rate": 1e5, "read_steps": 10,
               "syncs": {"sync": 1.0, "deferred": 0.0}}
    section = engine_overhead_fast.section(results, None, 4000, 2, quick=False)
    text = "\n".join(section.verdicts)
    assert "engine ÷ bare loop steps/s (tiny LoRA LM): 0.98 — goal ≥ 0.95 met" in text
    assert "bare loop steps/s (tiny LoRA LM): 500 — goal ≥ 1000 MISSED" in text
    assert "deferred ÷ sync readback steps/s on CPU: 0.979" in text
    assert "host syncs a step, deferred readback (counted on CPU): 0 — goal ≤ 0 met" in text
    assert "synchronous readback 1.00, deferred 0.00" in section.body


def test_compile_bench_table():
    from bench import compile_bench

    run = lambda rate, compile_s=0.0: {"steps_per_s": rate, "compile_s": compile_s, "recompiles": 0,  # noqa: E731
                                       "loss": 1.0}
    tasks = {"toy (demo)": {"mode": "model", "eager": [run(100.0), run(110.0)],
                            "compiled": [run(90.0, 20.0), run(99.0, 5.0)]}}
    peers = {"engine": [10.0, 10.5], "dataloader": [9.0, 10.0], "lightning": [9.0, 9.5]}
    section = compile_bench.section(tasks, peers, 120, 2, quick=False)
    assert "| toy (demo) | model | 105.0 (100.0–110.0) | 94.5 (90.0–99.0) | **0.900 (0.900–0.900)** |" in section.body
    text = "\n".join(section.verdicts)
    assert "compile ÷ eager on CPU, toy (demo): 0.900 (reported, no goal on CPU)" in text
    assert "compiled: engine ÷ compiled DataLoader loop steps/s: 1.08 — goal ≥ 1 met" in text
    assert "compiled: engine ÷ compiled Lightning steps/s: 1.11 — goal ≥ 1.05 met" in text


def _baseline_results(quiet: dict, load: dict | None = None, cores: dict | None = None, waits: dict | None = None,
                      loads: tuple[list, list] = ([1.2, 1.6], [2.9, 3.1])) -> dict:
    """bench.baselines.measure's shape from given steps/s (and cores, data waits) per variant and round."""
    from bench import baseline_variants as b

    results = {"_threads": 1, "_tried": {1: 14.0, 2: 9.0}, "_plans": [], "_loss": {}, "_capped": [],
               "_autogroup": "on", "_cores": 2, "_rounds": {"rounds": 3, "load": 1, "extra": 1}}
    results["_load"] = {"quiet": [loads[0]] * 3, "load": [loads[1]] * len(next(iter((load or {1: []}).values())))}
    for name in b.VARIANTS:
        entry = {"quiet": [], "load": [], "cores": {"quiet": [], "load": []},
                 "steps_per_cpu_s": {"quiet": [], "load": []}, "rows": {"quiet": [], "load": []}}
        for condition, series in (("quiet", quiet), ("load", load or {})):
            for i, rate in enumerate(series.get(name, [])):
                used = (cores or {}).get(name, {}).get(condition, [float("nan")] * 9)[i]
                entry[condition].append(rate)
                entry["cores"][condition].append(used)
                entry["steps_per_cpu_s"][condition].append(rate / used)
                entry["rows"][condition].append({"loss": 7.9747, "wall_s": 12.0, "build_ms": 60.0, "compute_ms": 55.0,
                                                 "data_share": (waits or {}).get(name, float("nan")),
                                                 "settling": 1.02})
                results["_loss"].setdefault(name, []).append(7.9747)
        results[name] = entry
    return results


def test_baselines_headline_is_judged_against_the_faster_careful_loop_with_its_rounds_and_load():
    from bench import baseline_variants as b
    from bench.baselines_page import section

    quiet = {b.ENGINE: [11.0, 11.4, 11.2], b.DATALOADER: [10.0] * 3, b.DATALOADER_2: [10.0, 10.5, 10.2],
             b.LIGHTNING: [9.6] * 3, b.LIGHTNING_2: [9.8] * 3, b.INLINE: [7.0]}
    built = section(_baseline_results(quiet), 100, (40, 95), quick=False)
    text = "\n".join(built.verdicts)
    assert ("engine default ÷ DataLoader loop steps/s (quiet): 1.1 — goal ≥ 1 met; against the faster careful "
            "DataLoader loop here, DataLoader loop (2 workers); 3 rounds, 1.086–1.100; load average 1.4 (1.2–1.6) "
            "through them") in text
    assert "engine default ÷ Lightning steps/s (quiet): 1.14 — goal ≥ 1.05 met; against the faster careful " \
           "Lightning here, Lightning (2 workers)" in text
    assert ("- engine ÷ DataLoader loop (1 worker): **1.120 (1.100–1.140)** over 3 round(s) (1.100, 1.140, 1.120); "
            "load average 1.4 (1.2–1.6) through them") in built.body
    assert "steps/s between the ends of steps 40 and 95" in built.body and "(tried: 1: 14.00 steps/s, 2: 9.00" \
        in built.body
    assert "Loss at step 100: 7.9747 for every variant and round" in built.body
    assert "a batch builds in 60 ms and a step computes in 55 ms" in built.body


def test_baselines_miss_reason_says_only_what_this_run_measured():
    from bench import baseline_variants as b
    from bench.baselines_page import section

    quiet = {b.ENGINE: [9.0, 10.5, 9.5], b.DATALOADER: [10.0] * 3, b.DATALOADER_2: [9.0] * 3,
             b.LIGHTNING: [9.0] * 3, b.LIGHTNING_2: [8.0] * 3}
    results = _baseline_results(quiet, waits={b.DATALOADER: 0.35})
    results["_plans"] = [f"quiet, {b.ENGINE}: threads: 1 torch thread, data in 2 worker processes (4 ahead) — "
                         f"batch {ms} ms ÷ step 65 ms" for ms in (68, 71)]
    line = section(results, 100, (40, 95), quick=False).verdicts[0]
    assert line.startswith("engine default ÷ DataLoader loop steps/s (quiet): 0.95 — goal ≥ 1 MISSED by 0.05")
    assert ("why (this run's measurements): the engine was behind in 2 of 3 rounds and ahead in the others (the "
            "rounds straddle 1: 0.900–1.050)") in line
    assert "the DataLoader loop (1 worker) waited 35% of its window for batches (its rate is its workers' pace)" in line
    assert "; its plan: threads: 1 torch thread, data in 2 worker processes (4 ahead); " in line  # once, not per run
    busy = section(_baseline_results(quiet, waits={b.DATALOADER: 0.05}), 100, (40, 95), quick=False).verdicts[0]
    assert "waited 5% of its window for batches (under 20%: not the data that set its rate)" in busy
    assert "data-bound" not in busy and "workers' pace" not in busy


def test_baselines_flags_variants_that_did_not_train_alike_or_were_timed_in_their_start_up():
    from bench import baseline_variants as b
    from bench.baselines_page import section

    results = _baseline_results({b.ENGINE: [11.0], b.DATALOADER: [10.0], b.DATALOADER_2: [10.0],
                                 b.LIGHTNING: [10.0], b.LIGHTNING_2: [10.0]})
    assert "Window past start-up (the process tree's CPU a step over the window's first third ÷ over its last third, " \
           "the worst quiet run of each variant): engine, defaults 1.02, DataLoader loop (1 worker) 1.02" in \
           section(results, 100, (40, 95), quick=False).body
    results["_loss"][b.LIGHTNING] = [8.5]
    results[b.ENGINE]["rows"]["quiet"][0]["settling"] = 1.6  # its workers still starting inside the window
    body = section(results, 100, (40, 95), quick=False).body
    assert "Loss at step 100 **differs** between variants" in body
    assert "**Not settled** (above 1.2): engine, defaults: their window's first steps cost more CPU" in body


def test_baselines_cpu_table_splits_the_loaded_rate_into_the_kernels_share_and_the_plans_efficiency():
    from bench import baseline_variants as b
    from bench.baselines_page import section

    # the shape measured on a 2-core box with autogroup: the engine keeps its steps per CPU-second, gets half the CPU
    quiet = {b.ENGINE: [14.0] * 3, b.DATALOADER: [14.0] * 3, b.DATALOADER_2: [14.0] * 3, b.LIGHTNING: [14.0] * 3,
             b.LIGHTNING_2: [14.0] * 3, b.ENGINE_T2: [8.0]}
    load = {b.ENGINE: [7.0], b.DATALOADER: [7.7], b.LIGHTNING: [7.0], b.ENGINE_T2: [0.3]}
    cores = {name: {"quiet": [2.0] * 3, "load": [1.0]} for name in quiet} | {b.ENGINE_T2: {"quiet": [2.0],
                                                                                          "load": [1.5]}}
    built = section(_baseline_results(quiet, load, cores), 100, (40, 95), quick=False)
    text = "\n".join(built.verdicts)
    assert ("engine default: loaded ÷ quiet steps/s: 0.5 — goal ≥ 0.9 MISSED by 0.4; load average 3.0 (2.9–3.1) "
            "through the loaded blocks — why: the kernel's share: beside the neighbour the engine's processes got "
            "0.50 of the CPU they used quiet (2.00 → 1.00 cores; autogroup on)") in text
    assert "engine default: steps per CPU-second, loaded ÷ quiet: 1 — goal ≥ 0.9 met" in text
    assert "engine --threads 2: steps per CPU-second, loaded ÷ quiet: 0.05 (the fixed setting, for contrast)" in text
    assert "Autogroup is **on** here (`/proc/sys/kernel/sched_autogroup_enabled`) on 2 usable cores" in built.body
    assert ("| engine, defaults | 2.00 (2.00–2.00) / 1.00 (1.00–1.00) | 0.500 (0.500–0.500) | 7.00 (7.00–7.00) | "
            "1.000 (1.000–1.000) |") in built.body
    assert "Beside the neighbour: engine ÷ DataLoader loop (1 worker) **0.909 (0.909–0.909)** over 1 round(s)" \
        in built.body


@pytest.mark.slow
@pytest.mark.timeout(300)  # three loops, Lightning's import among them: ~100 s at load 20
def test_baseline_loops_reach_the_same_loss_and_time_their_steps_like_the_engine():
    from bench import baseline_loops

    pytest.importorskip("lightning", reason="the bench extra: pip install -e '.[bench]'")
    inline = baseline_loops.dataloader_loop("demo", 3, 4, inline=True)
    loader = baseline_loops.dataloader_loop("demo", 3, 4, workers=0)
    lightning = baseline_loops.lightning_loop("demo", 3, 4, workers=0)
    assert len(inline["marks"]) == len(loader["marks"]) == len(lightning["marks"]) == 3
    assert inline["loss"] == loader["loss"] == pytest.approx(lightning["loss"], rel=1e-6)
    assert len(inline["data_s"]) == 3 and all(d > 0 for d in inline["data_s"]) and lightning["data_s"] == []
    # wall-clock stamps (the clock of the engine's step events), one per step, in order
    assert abs(loader["marks"][-1] - time.time()) < 60 and loader["marks"] == sorted(loader["marks"])
    assert baseline_loops.window_rate(loader["marks"], 1, 3) > 0
    assert math.isnan(baseline_loops.window_rate(loader["marks"], 2, 4))  # a step the run never reached


def test_a_runs_rate_cpu_data_wait_and_settling_come_from_the_same_steps():
    from bench.baselines import window_row
    from bench.cpu_share import CpuTrace

    # step s ends at 100 + 0.1 s (10 steps/s); the tree burns 2 cores until t = 105 (step 50), then 1
    trace = CpuTrace(0)
    trace.samples = [(t, 2 * (t - 100) if t <= 105 else 10 + (t - 105)) for t in (100 + 0.05 * i for i in range(221))]
    run = {"marks": [100 + 0.1 * s for s in range(1, 101)], "data_s": [0.04] * 100, "trace": trace,
           "loss": 7.9747, "wall_s": 12.0, "plan": "", "capped": None}
    row = window_row(run, (40, 95))
    assert row["steps_per_s"] == pytest.approx(10.0)
    assert row["cores"] == pytest.approx((14.5 - 8.0) / 5.5)  # the CPU between the ends of steps 40 and 95
    assert row["data_share"] == pytest.approx(0.4) and row["build_ms"] == pytest.approx(40.0)
    assert row["compute_ms"] == pytest.approx(60.0)
    assert row["settling"] == pytest.approx(2.8 / 1.8)  # steps 40-58 cost 2.8 CPU-s, steps 77-95 1.8
    assert window_row(run, (60, 95))["settling"] == pytest.approx(1.0)  # past the costly start


def test_baselines_runs_are_long_enough_for_the_engine_to_plan_as_a_real_run_does():
    from bench import baseline_variants as b
    from engine.training.batch_source import MEASURE_TAKES
    from engine.training.threads import Cores, Costs, plan

    # the demo's costs on 2 cores, batch 16: a batch builds in about a step's time (the plans on the page)
    costs = Costs(batch_s=0.068, step_s=0.065)
    for size in ("full", "quick"):
        steps, (lo, hi), rounds, load_rounds, extra_rounds, _ = b.SIZES[size]
        chosen = plan(Cores(2), viewer=False, costs=costs, steps_left=steps - MEASURE_TAKES)
        assert chosen.data == "workers", (size, chosen.line())
        assert lo >= 30 and hi < steps and rounds >= 3 and extra_rounds >= load_rounds


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_baselines_measure_times_the_engine_and_a_loop_over_the_same_steps_read_alike():
    from bench import baselines as b

    results = b.measure(8, (3, 7), 1, with_load=False, variants=(b.ENGINE, b.DATALOADER), threads=1)
    for name in (b.ENGINE, b.DATALOADER):
        (row,) = results[name]["rows"]["quiet"]
        assert row["steps_per_s"] > 0 and row["cores"] > 0, (name, row)  # CPU read from outside, for both
        assert math.isfinite(row["settling"]) and row["wall_s"] > 0
    assert results["_loss"][b.ENGINE] == pytest.approx(results["_loss"][b.DATALOADER], rel=1e-4)
    assert results["_load"]["quiet"][0]  # the load average sampled through the block
    assert results["_plans"] and "threads:" in results["_plans"][0]


def test_only_rewrites_its_sections_and_keeps_the_rest(tmp_path, monkeypatch):
    monkeypatch.setattr(results_page, "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "BENCHMARKS.md"
    page.write_text("# Benchmarks\n\nMachine: old.\n\n## Goals\n\n- kept goal: 1 — goal ≥ 1 met\n"
                    "- redo: 0.5 — goal ≥ 1 MISSED by 0.5\n\n## Kept\n\nold body\n\n## Redo\n\nold redo body\n")
    results_page.write_page([Section("Redo", "python -m bench --only redo", "new body", ["redo: 1.2 — goal ≥ 1 met"]),
                      Section("New one", "cmd", "fresh", [])], quick=False, argv=["--only", "redo"], facts="box",
                     partial=True)
    text = page.read_text()
    assert "Machine: old." in text and "## Kept\n\nold body" in text and "kept goal: 1" in text
    assert "new body" in text and "old redo body" not in text and "redo: 0.5" not in text and "redo: 1.2" in text
    assert text.index("## Redo") < text.index("## New one")
    assert "Sections Redo, New one re-measured by `python -m bench --only redo` on: box." in text
    # a later partial run of another section keeps this note; one that measures Redo and New one again drops it
    results_page.write_page([Section("Kept", "cmd", "kept again", [])], quick=False, argv=["--only", "kept"],
                     facts="box 2", partial=True)
    text = page.read_text()
    assert "Sections Redo, New one re-measured" in text and "Sections Kept re-measured" in text
    results_page.write_page([Section("Redo", "cmd", "b", []), Section("New one", "cmd", "c", [])], quick=False,
                     argv=["--only", "redo"], facts="box 3", partial=True)
    text = page.read_text()
    assert "on: box." not in text and "Sections Kept re-measured" in text and "on: box 3." in text


def test_allocator_bench_runs_the_default_variant_with_the_engine_deferring_and_leaves_its_own_env(monkeypatch):
    from bench import allocator, baselines

    seen = []

    def fake_rate(steps, window, root, env=None):
        seen.append(baselines._env(env).get("MALLOC_ARENA_MAX"))  # what the engine process would find
        return {"steps_per_s": 12.0 if seen[-1] is None else 10.0, "steps_per_cpu_s": 6.0}

    monkeypatch.setattr(baselines, "engine_rate", fake_rate)
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.setenv("BENCH_SMOKE", "0")
    results = allocator.measure(8, (3, 7), 2)
    assert seen == [None, "16", "16", None]  # interleaved A B, B A
    assert "MALLOC_ARENA_MAX" not in os.environ
    assert [r["steps_per_s"] for r in results[allocator.TUNED]] == [12.0, 12.0]


def test_autotune_bench_budget_excludes_the_top_and_scores_the_choice_by_the_grids_own_rate():
    from bench import autotune as bench_autotune

    w = bench_autotune.Workload("w", ("--grad-accum", "4"), {"grad_accum": (1, 4, 16)}, 16, 1, "samples/s")
    key = {g: bench_autotune._key({"grad_accum": g}) for g in (1, 4, 16)}
    peaks = {key[1]: 300 << 20, key[4]: 200 << 20, key[16]: 100 << 20}
    budget = bench_autotune.budget_gb(peaks, key[4]) * 0.9 * (1 << 30)
    assert 200 << 20 < budget < 300 << 20  # the largest micro-batch excluded, the start inside
    run = {"refused": False, "seconds": 20.0}
    results = {"peaks": peaks, "vram": 0.3, "grid_walls": [40.0], "start": key[4],
               "grid": {key[1]: [{"rate": None, "seconds": 5.0, "refused": True}],
                        key[4]: [{**run, "rate": 150.0}], key[16]: [{**run, "rate": 100.0}]},
               "tunes": [{"chose": {"status": "kept", "settings": {"grad_accum": 4}, "seconds": 2.0,
                                    "table": [{}, {}]}, "started": {"refused": 1}, "ooms": 0}]}
    lines, verdicts = bench_autotune.summarize(w, results)
    text = "\n".join(lines)
    assert "refused (predicted not to fit)" in text and "grad_accum 4 **best**" in text
    assert "| 1 | kept: grad_accum 4 | 1.000 | 2.0 | 40 | 0.050 | 2 measured, 1 refused | 0 |" in text
    assert all("met" in v for v in verdicts), verdicts
    assert w.tune_settings() == ["grad_accum=1|4|16"]


def test_gpu_autotune_row_reads_the_search_and_counts_out_of_memory_events():
    from bench import autotune_gpu
    from engine.run import events as ev

    table = [{"settings": {"grad_accum": 4}, "predicted": 10 << 30, "measured": 9 << 30, "rate": 10.0, "noise": 0.02,
              "chosen": False},
             {"settings": {"grad_accum": 1}, "predicted": 30 << 30, "measured": 41 << 30, "rate": 30.0, "noise": 0.03,
              "chosen": True}]
    events = [ev.AutotuneStarted(start={"grad_accum": 4}, candidates=3, refused=1, budget=40 << 30),
              ev.Warning(text="step 9: out of memory: micro-batch 8 -> 4"),
              ev.AutotuneChose(status="chosen", settings={"grad_accum": 1}, rate=30.0, start_rate=10.0, table=table,
                               seconds=12.0)]
    row = autotune_gpu.row(events, {("grad_accum", "1"): 1, ("grad_accum", "4"): 1})
    assert (row["gain"], row["ooms"], row["measured"], row["refused"]) == (3.0, 2, 2, 1)  # the OOM, the peak over
    verdicts: list[str] = []
    line = autotune_gpu.section_line(row, verdicts)
    assert "chosen grad_accum 1, x3.00 the start's rate" in line and "1 of 4 combinations" in line
    assert verdicts[0].startswith("GPU autotune: out-of-memory events: 2") and "MISSED" in verdicts[0]
    assert "error" in autotune_gpu.row(events[:1], {})


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.skipif(shutil.which("tmux") is None, reason="bench.long_runs drives the viewer in tmux")
def test_long_runs_smoke_measures_every_row_with_the_real_viewer():
    from bench import long_runs
    from bench.long_runs import section

    plan = long_runs.plan()  # smoke: a 5,000-step run, an old one, 100 names, a 6,000-step soak, in tmux
    results, load = long_runs.measure(plan)
    sized = results["sizes"][5000]
    opened = sized["finished"]["opens"][0]
    assert opened["first_s"] > 0 and 0 < opened["steady_mib"] <= opened["peak_mib"] and opened["capped_at"] is None
    assert len(sized["finished"]["keys"]) == plan.keys and sized["reads"]
    assert 57 <= sized["record_b"] / 5000 < 100  # the default metrics' 57 B a step, plus headers and the pyramid
    assert sized["live"]["lags"] and sized["live"]["rate"] > 0
    assert results["old"]["direct"]["calls"] >= 2 and results["old"]["viewer"]["full_s"] is not None
    assert results["names"][100]["open"]["opens"][0]["first_s"] is not None
    assert results["soak"]["lags"] and results["soak"]["followed"] >= plan.soak
    assert section.soak_growth(results["soak"]) is not None
    assert load.values("soak") and load.values("size 5000")
    built = section.build(results, plan, load, "python -m bench --only long_runs")
    text = "\n".join(built.verdicts)
    for goal in ("first full frame, 5,000 steps (wall, fresh process)", "viewer peak RSS, finished run of 5,000",
                 "viewer peak RSS, live run of 5,000", "step record bytes a step", "run directory of 100M steps",
                 "zoom and pan frame, 5,000 steps", "conversion shows a progress bar", "one-time conversion",
                 "first full frame, 100 metric names", "live soak, writer steps/s", "viewer RSS growth",
                 "lag behind the writer (max)"):
        assert goal in text, (goal, text)
