"""Live autotune: the search refuses what the budget predicts not to fit, stops where nothing can win, and a
tuned run trains the same losses as an untuned one with the same effective batch.

The in-process runs share one module fixture: a toy run tuned at its start under a budget that rules out part
of its space, and the same run untuned; each assertion reads their event logs.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from engine.training.autotune_search import CoordinateSearch, Dimension, Measure
from engine.training.autotune_space import count_refused, dimensions, micro_batches
from tests.conftest import read_events


def _search(dims, start, rate, fits=lambda s: True, noise=0.02, limit=50):
    """Run a search against a rate function; (the search, the settings it measured in order)."""
    search = CoordinateSearch(dims, start, fits, limit)
    tried = []
    while (candidate := search.next()) is not None:
        tried.append(candidate)
        search.record(candidate, Measure(rate(candidate), noise))
    return search, tried


def test_candidates_predicted_not_to_fit_are_counted_and_never_measured() -> None:
    dims = [Dimension("grad_accum", (1, 2, 4, 8), ordered=True), Dimension("backend", ("fast", "slow"))]
    too_big = {1, 2}  # the two largest micro-batches do not fit

    def fits(s):
        return s["grad_accum"] not in too_big

    search, tried = _search(dims, {"grad_accum": 4, "backend": "slow"}, lambda s: 10.0 / s["grad_accum"], fits)
    assert tried and all(fits(s) for s in tried)
    assert search.refused == 2  # grad_accum 2 and 1, the direction toward a larger micro-batch
    assert search.result()[0] == {"grad_accum": 4, "backend": "slow"}
    fit, refused = count_refused(dims, {"grad_accum": 4, "backend": "slow"}, fits)
    assert (fit, refused) == (4, 4)


def test_an_ordered_sweep_stops_where_the_rest_cannot_win_and_finds_the_peak() -> None:
    values = tuple(range(1, 17))
    dims = [Dimension("threads", values, ordered=True)]

    def rate(s):  # one peak at 6 threads
        return 100.0 - 3.0 * abs(s["threads"] - 6)

    search, tried = _search(dims, {"threads": 3}, rate)
    assert search.result()[0] == {"threads": 6}
    assert search.pruned > 0 and len(tried) < len(values)
    assert {"threads": 16} not in tried  # far past the peak: never measured


def test_a_gain_inside_the_noise_does_not_move_the_setting() -> None:
    dims = [Dimension("backend", ("a", "b"))]
    search, _ = _search(dims, {"backend": "a"}, lambda s: 100.0 if s["backend"] == "a" else 103.0, noise=0.05)
    assert search.result()[0] == {"backend": "a"}
    assert Measure(110.0, 0.05).beats(Measure(100.0, 0.02)) and not Measure(104.0, 0.05).beats(Measure(100.0, 0.0))


def test_a_choice_that_does_not_fit_is_tried_at_the_nearest_smaller_micro_batch() -> None:
    # The LM bench's space: checkpointing off is faster but needs more memory; the fastest setting that fits
    # (micro-batch 4, off) differs from the best coordinate descent reaches alone (micro-batch 8, on) in both.
    dims = [Dimension("grad_accum", (1, 2, 4, 8, 16), ordered=True), Dimension("checkpointing", (True, False))]
    peak = {(1, True): 14.5, (2, True): 7.7, (4, True): 4.2, (8, True): 2.5, (16, True): 1.7,
            (1, False): 25.7, (2, False): 13.3, (4, False): 7.0, (8, False): 3.9, (16, False): 2.3}
    rate = {(2, True): 23.0, (4, True): 18.5, (8, True): 12.9, (16, True): 8.2,
            (4, False): 30.2, (8, False): 23.7, (16, False): 15.8}

    def fits(s):
        return peak[(s["grad_accum"], s["checkpointing"])] <= 10.0

    search, tried = _search(dims, {"grad_accum": 8, "checkpointing": True},
                            lambda s: rate[(s["grad_accum"], s["checkpointing"])], fits)
    assert search.result()[0] == {"grad_accum": 4, "checkpointing": False}
    assert all(fits(s) for s in tried) and search.refused >= 2
    # past the start, on the side away from the best, nothing is measured; nor past a value far behind
    assert {"grad_accum": 16, "checkpointing": True} not in tried
    assert {"grad_accum": 16, "checkpointing": False} not in tried
    assert len(tried) == 5, tried


def test_a_choice_as_fast_but_lighter_takes_the_place_and_opens_a_larger_micro_batch() -> None:
    # The SensorLM bench's space: sdpa is as fast as math at micro-batch 4 but needs less memory, so at micro-batch
    # 8 (grad_accum 2) only sdpa fits, and wins there.
    dims = [Dimension("grad_accum", (1, 2, 4, 8), ordered=True), Dimension("backend", ("math", "sdpa"))]
    peak = {(1, "math"): 50, (2, "math"): 30, (4, "math"): 16, (8, "math"): 9,
            (1, "sdpa"): 40, (2, "sdpa"): 20, (4, "sdpa"): 11, (8, "sdpa"): 7}
    rate = {(2, "sdpa"): 150.0, (4, "math"): 120.0, (4, "sdpa"): 121.0, (8, "math"): 80.0, (8, "sdpa"): 81.0}

    def fits(s):
        return peak[(s["grad_accum"], s["backend"])] <= 25

    def run(peak_of):
        search = CoordinateSearch(dims, {"grad_accum": 4, "backend": "math"}, fits, 50, peak=peak_of)
        while (candidate := search.next()) is not None:
            search.record(candidate, Measure(rate[(candidate["grad_accum"], candidate["backend"])], 0.03))
        return search.result()[0]

    assert run(lambda s: peak[(s["grad_accum"], s["backend"])]) == {"grad_accum": 2, "backend": "sdpa"}
    assert run(None) == {"grad_accum": 4, "backend": "math"}  # without the peaks: stuck where it started
    # when the room does not pay (sdpa does not fit at micro-batch 8 either), the faster measured one is the result
    rate[(4, "sdpa")] = 112.0
    peak[(2, "sdpa")] = 26
    assert run(lambda s: peak[(s["grad_accum"], s["backend"])]) == {"grad_accum": 4, "backend": "math"}


def test_a_candidate_line_says_why_it_is_the_best_and_writes_its_rate_out() -> None:
    """A candidate slower than the best but lighter within the noise was printed "(best so far)", which read as a
    bug; an LM's rate was printed 1.861e+04 tokens/s. Each best now says why it won, with the numbers."""
    from engine.run import events as ev
    from engine.run.autotune_events import line

    dims = [Dimension("backend", ("math", "sdpa"))]
    peak = {"math": 16 << 20, "sdpa": 11 << 20}
    search = CoordinateSearch(dims, {"backend": "math"}, lambda s: True, 50, peak=lambda s: peak[s["backend"]])
    reasons = {}
    while (candidate := search.next()) is not None:
        rate = {"math": 18_610.0, "sdpa": 18_240.0}[candidate["backend"]]  # 2 % slower, inside the 3 % noise
        reasons[candidate["backend"]] = search.record(candidate, Measure(rate, 0.03))
    assert reasons["math"] == "the first measured, the rate to beat"
    assert reasons["sdpa"] == "same speed within the noise (-2% against ±3%), 5.0 MiB less memory"
    said = line(ev.AutotuneCandidate(settings={"backend": "sdpa"}, rate=18_240.0, noise=0.03, steps=6, warmup=2,
                                     best=True, why=reasons["sdpa"]), "tokens/s")
    assert said.startswith("backend sdpa: 18,240 tokens/s ±3% ") and "e+0" not in said
    assert said.endswith("(best so far: same speed within the noise (-2% against ±3%), 5.0 MiB less memory)")
    chose = line(ev.AutotuneChose(settings={"backend": "sdpa"}, rate=18_240.0, start_rate=18_610.0, table=[{}, {}]),
                 "tokens/s")
    assert ": 18,240 tokens/s, x0.98 the start" in chose


def test_the_space_keeps_the_math_unless_asked() -> None:
    from engine.core.registry import get_spec

    assert micro_batches(16, 4) == (1, 2, 4, 8, 16)
    assert micro_batches(6, 3) == (1, 2, 3, 6)  # 6, 3, 2, 1 samples per micro-batch
    from engine.core.live_table import ENGINE

    sensor = ENGINE.for_task(get_spec("sensorlm").capabilities)
    current = {"grad_accum": 1, "attn_backend": "sdpa", "attn_chunk": 256, "activation_checkpointing": False,
               "threads": 0, "data_workers": -1}
    dims, note = dimensions(sensor, [], 16, 2, current)
    names = [d.name for d in dims]
    assert "grad_accum" not in names and "attn_backend" in names and "threads" in names  # contrastive loss
    assert "grad_accum" in note
    chunk = next(d for d in dims if d.name == "attn_chunk")
    assert chunk.requires == (("attn_backend", "chunked"),) and chunk.ordered
    dims, _ = dimensions(sensor, ["grad_accum", "attn_backend"], 16, 2, current)
    assert [d.name for d in dims] == ["grad_accum", "attn_backend"]
    dims, _ = dimensions(sensor, ["grad_accum=4|16", "activation_checkpointing=true"], 16, 2, current)
    assert [(d.name, d.values) for d in dims] == [("grad_accum", (1, 4, 16)),  # the value in force stays
                                                  ("activation_checkpointing", (False, True))]
    from engine.core import config as cfg

    with pytest.raises(cfg.ConfigError, match="autotune.settings: 'Grad=' is not a setting name"):
        cfg.validate({"autotune": {"settings": ["Grad="]}}, "flags")
    # A kernel switch leaves the data workers running (a search would restart them at every candidate)
    from engine.training.live_settings import LiveSettings

    sensor_run = LiveSettings(cfg.load(overrides={"task": {"name": "sensorlm"}}), None, None, None)
    lm_run = LiveSettings(cfg.load(overrides={"task": {"name": "lm"}}), None, None, None)
    assert not sensor_run.affects_data("attn_backend") and not lm_run.affects_data("activation_checkpointing")
    assert lm_run.affects_data("seq_len")
    lm = ENGINE.for_task(get_spec("lm").capabilities)
    dims, note = dimensions(lm, [], 8, 2, {**current, "seq_len": 128})
    assert "seq_len" in note and "seq_len" not in [d.name for d in dims]
    assert [d.name for d in dims][:2] == ["grad_accum", "activation_checkpointing"]


# -- real runs, in this process -----------------------------------------------------------------------------
BASE = ["--task", "toy", "--threads", "1", "--batch-size", "16", "--grad-accum", "4", "--eval-every", "0",
        "--lr", "3e-3", "--set", "toy.dropout=0"]
TOY = [*BASE, "--max-steps", "40", "--set", "train.log_every=1", "--checkpoint-every", "10",
       "--set", "checkpoint.keep_last=8"]
TUNE = ["--set", "autotune.on_start=true", "--set", "autotune.settings=['grad_accum']",
        "--set", "autotune.warmup_steps=1", "--set", "autotune.window_steps=2"]


def _train(run: Path, *flags: str) -> int:
    from engine.app.main import run_prepared
    from engine.app.prepare import prepare
    from engine.core.cli_args import OneLineParser, add_train_arguments

    parser = OneLineParser(prog="t")
    add_train_arguments(parser)
    prepared = prepare(parser.parse_args([*flags, "--run-dir", str(run)]))
    return run_prepared(prepared, console=False, install_signals=False, serve_controls=False)


def _budget_between(ga_fits: int, ga_refused: int) -> float:
    """A --vram-gb whose budget lies between the toy's predicted peaks at two micro-batchings."""
    from engine.budget import plan as planner
    from engine.core import config as cfg

    config = cfg.load(overrides={"task": {"name": "toy"}, "train": {"batch_size": 16}, "toy": {"dropout": 0}})
    predict = planner.predictor_for(config, "cpu")
    low, high = predict(grad_accum=ga_fits).total, predict(grad_accum=ga_refused).total
    assert low < high, (low, high)
    return (low + high) / 2 / 0.9 / (1 << 30)  # budget.safety 0.9


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("autotune")
    vram = _budget_between(4, 2)
    assert _train(root / "plain", *TOY, "--vram-gb", f"{vram:.12f}") == 0
    assert _train(root / "tuned", *TOY, *TUNE, "--vram-gb", f"{vram:.12f}") == 0
    assert _train(root / "tuned", "--resume", str(root / "tuned"), "--max-steps", "48") == 0
    return root


def _losses(events) -> dict[int, float]:
    return {e["step"]: e["loss"] for e in events if e.get("type") == "step" and not e["skipped"]}


@pytest.mark.slow
def test_losses_over_the_autotune_window_match_an_untuned_run(runs) -> None:
    tuned, plain = read_events(runs / "tuned"), read_events(runs / "plain")
    started = next(e for e in tuned if e["type"] == "autotune_started")
    chose = next(e for e in tuned if e["type"] == "autotune_chose")
    moved = {e["new"] for e in tuned if e["type"] == "setting" and e["name"] == "grad_accum"}
    assert len(moved) >= 2, "the search changed the micro-batching more than once"
    a, b = _losses(tuned), _losses(plain)
    for step in range(started["step"] + 1, chose["step"] + 1):  # every step the search trained on
        assert math.isclose(a[step], b[step], rel_tol=1e-5), (step, a[step], b[step])
    assert all(math.isclose(a[s], b[s], rel_tol=1e-5) for s in range(1, 41))


def test_the_budget_rules_out_candidates_before_they_are_tried(runs) -> None:
    events = read_events(runs / "tuned")
    started = next(e for e in events if e["type"] == "autotune_started")
    assert started["space"] == {"grad_accum": [1, 2, 4, 8, 16]}
    assert started["refused"] >= 1 and started["candidates"] + started["refused"] == 5
    candidates = [e for e in events if e["type"] == "autotune_candidate"]
    assert len(candidates) >= 2
    assert all(c["predicted"] <= started["budget"] for c in candidates)
    assert 2 not in {c["settings"]["grad_accum"] for c in candidates}  # predicted over the budget: never applied
    assert not any(e["type"] == "warning" and "out of memory" in e["text"] for e in events)
    assert all(c["measured"] and c["steps"] >= 1 and c["rate"] > 0 and c["noise"] >= 0 for c in candidates)


def test_the_choice_is_applied_recorded_and_kept_by_a_resume(runs) -> None:
    events = read_events(runs / "tuned")
    chose = next(e for e in events if e["type"] == "autotune_chose")
    assert chose["status"] in ("chosen", "kept") and chose["rate"] > 0
    chosen = chose["settings"]["grad_accum"]
    assert sum(row["chosen"] for row in chose["table"]) == 1
    assert [r["settings"] for r in chose["ranks"]] == [{"grad_accum": chosen}]
    import tomllib

    recorded = tomllib.loads((runs / "tuned" / "config.toml").read_text())
    assert recorded["train"]["grad_accum"] == chosen and recorded["autotune"]["on_start"] is False
    resumed = [e for e in events if e["type"] == "run_started"][-1]
    assert resumed["resumed_from"] and resumed["config"]["train"]["grad_accum"] == chosen
    assert sum(e["type"] == "autotune_started" for e in events) == 1  # the resume did not search again
    assert [e["steps"] for e in events if e["type"] == "run_finished"] == [40, 48]


def test_a_checkpoint_mid_search_holds_the_settings_before_it_and_a_mark_that_it_ran(runs) -> None:
    """It held the candidate in force: a kill -9 then resumed with a setting no one chose (tests/engine/reliability/
    test_autotune_faults.py resumes from one)."""
    from engine.checkpoint import format as ckpt

    events = read_events(runs / "tuned")
    started = next(e for e in events if e["type"] == "autotune_started")
    chose = next(e for e in events if e["type"] == "autotune_chose")
    inside = [s for s in (10, 20, 30) if started["step"] < s < chose["step"]]
    assert inside, (started["step"], chose["step"])
    step = inside[0]
    in_force = 4
    for e in events:
        if e["type"] == "setting" and e["name"] == "grad_accum" and e["step"] <= step:
            in_force = e["new"]
    assert in_force != started["start"]["grad_accum"], "a candidate was in force at that checkpoint"
    meta = ckpt.read(runs / "tuned" / "checkpoints" / f"step-{step:08d}.safetensors").meta
    assert meta["step"] == step and meta["grad_accum"] == meta["config"]["train"]["grad_accum"] == 4
    assert meta["autotune"] == {"since": started["step"], "reason": "train --autotune"}
    assert meta["config"]["autotune"]["on_start"] is True


def test_a_viewer_starts_a_search_and_its_cancel_restores_the_settings_before_it(tmp_path) -> None:
    import time

    from engine.app.inprocess import InProcessSession
    from engine.app.prepare import prepare
    from engine.core.cli_args import OneLineParser, add_train_arguments
    from engine.run.control import requests as control
    from engine.run.control.requests import Request, RequestError

    with pytest.raises(RequestError, match="autotune mode 'later'"):
        Request.from_dict({"v": 1, "id": "a", "action": "autotune", "mode": "later"})
    parser = OneLineParser(prog="t")
    add_train_arguments(parser)
    prepared = prepare(parser.parse_args([*BASE, "--max-steps", "100000", "--run-dir", str(tmp_path / "r"),
                                          "--set", "autotune.settings=['grad_accum']",
                                          "--set", "autotune.warmup_steps=1", "--set", "autotune.window_steps=2"]))
    session = InProcessSession(prepared)
    try:
        seen: list = []
        deadline = time.monotonic() + 60
        while not any(e.type == "step" for e in seen):
            assert time.monotonic() < deadline
            seen += session.poll(0.1)
        assert session.send(control.autotune("cancel")).type == "refused"  # nothing to cancel yet
        started = session.send(control.autotune())
        assert started.type == "autotune_started" and started.start == {"grad_accum": 4}
        assert session.send(control.autotune()).type == "refused"  # one search at a time
        while not any(e.type == "setting" and e.name == "grad_accum" and e.new != 4 for e in seen):
            assert time.monotonic() < deadline
            seen += session.poll(0.1)
        cancelled = session.send(control.autotune("cancel"))
        assert cancelled.type == "autotune_chose" and cancelled.status == "cancelled"
        assert cancelled.settings == {"grad_accum": 4}
        seen += session.poll(0.2)
        last = [e for e in seen if e.type == "setting" and e.name == "grad_accum"][-1]
        assert last.new == 4 and "restored" in last.reason
        assert session.send(control.set_value("threads", 1)).type == "setting"  # the engine's live knobs too
        assert "1024" in session.send(control.set_value("threads", 5000)).why  # within the config's bounds
    finally:
        session.send(control.abort("now"))
        session.wait(30)


def test_lm_activation_checkpointing_switches_live_and_keeps_the_loss() -> None:
    import torch

    from engine.core import config as cfg
    from engine.core.registry import make_task

    config = cfg.load(overrides={"task": {"name": "lm", "preset": "tiny"}, "lm": {"corpus_bytes": 20000}})
    task = make_task(config, None)
    task.setup(None)
    model = task.build_model()
    batch = task.make_batch([0, 1], 0, True)
    layers = model.get_base_model().model.layers

    def step():
        model.zero_grad()
        loss, _ = task.loss(model, batch, 0)
        loss.backward()
        return loss.item(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    plain = step()
    task.apply_setting(model, "activation_checkpointing", True)
    assert all(layer.gradient_checkpointing for layer in layers)
    recomputed = step()
    task.apply_setting(model, "activation_checkpointing", False)
    assert not any(layer.gradient_checkpointing for layer in layers)
    assert recomputed[0] == plain[0] and all(torch.equal(a, b) for a, b in zip(plain[1], recomputed[1]))


def test_viewers_runs_and_plot_read_the_search(runs) -> None:
    from engine.run.history import read_history
    from tui.commands.plot import render
    from tui.commands.runs import table
    from tui.model.dashboard import RunModel
    from tui.model.run_index import list_runs

    events = read_events(runs / "tuned")
    chose = next(e for e in events if e["type"] == "autotune_chose")
    model = RunModel()
    model.ingest(read_history(runs / "tuned" / "events.jsonl"))
    state = model.autotune
    assert not state.active and state.chose.status == chose["status"]
    rows = state.rows()
    assert len(rows) == len(chose["table"]) and sum(r[-1] == "chosen" for r in rows) == 1
    # the first candidate is the start, said once above the table; the others by what they change from it
    assert rows[0][1] == "start" and state.start_text() == "start: grad_accum 4"
    assert "MiB" in rows[0][2] and "MiB" in rows[0][3]
    assert f"grad_accum {chose['settings']['grad_accum']}" in state.headline()
    listed = {r.name: r for r in list_runs(runs)}
    assert listed["tuned"].autotune["settings"] == chose["settings"] and listed["plain"].autotune is None
    lines = table(list(listed.values())).splitlines()
    assert "TUNED" in lines[0].split()
    tuned_line = next(line for line in lines if line.startswith("tuned"))
    import re  # the table shows the gain (x2.8), or how the search ended; its step is in --json

    shown = re.search(r"\sx[\d.e+]+\s", tuned_line) if chose["status"] == "chosen" else chose["status"] in tuned_line
    assert shown, tuned_line
    chart = render([runs / "tuned"], "autotune_rate", 100, 12)
    assert "autotune_rate" in chart and "candidate" in chart
    from engine.run import autotune_events
    from engine.run import events as ev

    said = autotune_events.line(ev.from_dict(chose))  # the headless console's line
    assert said.startswith(f"{chose['status']} grad_accum {chose['settings']['grad_accum']}") and "candidates" in said


def test_a_window_ends_halfway_in_a_real_run_when_its_candidate_clearly_loses(tmp_path, monkeypatch) -> None:
    """End to end, one window ends halfway. The policy itself is the offline test's below; here the run's step
    times come from an injected sleep per micro-batch (engine.training.faults' ``slow@A-B=S``) that dwarfs the
    compute, so the start (grad_accum 1) is the fastest and grad_accum 2 is twice as slow: a clear loser at its
    halfway look at any load. (Timed by the box alone, every candidate's noise was 0.05-0.5 under load 10-18 and
    no window ended halfway.)"""
    from engine.training.autotune import EARLY_NOISE, MIN_TIMED
    from engine.training.faults import ENV

    window = 12
    monkeypatch.setenv(ENV, "slow@1-80=0.05")
    flags = [*BASE, "--grad-accum", "1", "--max-steps", "100", "--checkpoint-every", "0",
             "--set", "autotune.on_start=true", "--set", "autotune.settings=['grad_accum']",
             "--set", "autotune.warmup_steps=1", "--set", f"autotune.window_steps={window}"]
    assert _train(tmp_path / "run", *flags) == 0
    table = next(e for e in read_events(tmp_path / "run") if e["type"] == "autotune_chose")["table"]
    shown = [(row["settings"], row["steps"], row["noise"], row["ended"]) for row in table]
    assert [row["ended"] for row in table if row["settings"]["grad_accum"] == 2] == ["halfway"], shown
    best = None
    for row in table:
        if row["ended"] == "halfway":  # a steady rate, or a clear loser to the best before it
            assert MIN_TIMED <= row["steps"] <= window // 2
            loses = best is not None and row["rate"] * (1 + max(row["noise"], best["noise"])) < best["rate"]
            assert row["noise"] <= EARLY_NOISE or loses, (row, best)
        if row["best"]:
            best = row


def _offline_tuner(live, steering, events: list, **config):
    """An Autotuner with no engine around it, on the live settings ``live`` through ``steering``; every candidate
    fits. The test steps it (``boundary``, then ``observe`` with step times it chooses). (The tuner, its progress:
    the test sets its ``step``.)"""
    from engine.core.core_sections import AutotuneConfig
    from engine.distributed.parallel import Single
    from engine.training.autotune import Autotuner
    from engine.training.threads import Cores

    class Budget:
        counted_step = None

        def peak_for(self, memory):
            return 1, None

        def open_window(self) -> None:
            pass

        def window_peak(self):
            return None

    class Plan:
        cores, ready = Cores(2), True

    class Run:
        step, total_steps = 10, 100_000

    class Order:
        def per_rank(self, n):
            return n

    run = Run()
    tuner = Autotuner(AutotuneConfig(**config), live, steering, Budget(), Plan(), Single(), run, Order(),
                      lambda: None, events.append)
    return tuner, run


def test_a_candidate_refused_part_way_is_taken_back_whole_and_each_candidate_has_its_own_number() -> None:
    """A candidate whose second change was refused kept its first one in force, and the next candidate was given
    the failed one's number. Here the steering refuses threads=2: the candidate after the grad_accum sweep moves
    grad_accum back to the best (2) and threads to 2, from the last measured (grad_accum 1)."""
    import re

    from engine.core import config as cfg
    from engine.training.live_settings import LiveSettings

    settings = LiveSettings(cfg.load(overrides={"task": {"name": "toy"}, "train": {"batch_size": 8, "grad_accum": 8},
                                                "runtime": {"threads": 1}}), None, None, None)
    events: list = []

    class Steering:
        def change(self, name, value):
            if (name, value) == ("threads", 2):
                raise ValueError("threads 2 refused by the test")
            return settings.change(name, value)

    tuner, run = _offline_tuner(settings, Steering(), events, settings=["grad_accum", "threads"],
                                warmup_steps=0, window_steps=2)
    assert tuner.start("test") == ""
    seconds = {8: 0.008, 4: 0.004, 2: 0.002, 1: 0.003}  # grad_accum 2 is the fastest
    while tuner.active:
        run.step += 1
        assert run.step < 1000
        tuner.observe(run.step, seconds[settings.grad_accum], 8)
        tuner.boundary()
    changes = [(e.name, e.old, e.new, e.reason) for e in events if e.type == "setting"]
    back = [c for c in changes if "taken back" in c[3]]
    tried = next(c[3] for c in changes if c[1:3] == (1, 2))  # grad_accum back to 2, with threads 2 (refused)
    assert back and back[0][:3] == ("grad_accum", 2, 1) and back[0][3].startswith(f"{tried} taken back (threads 2 ")
    numbers = [int(re.match(r"autotune: candidate (\d+)", c[3]).group(1)) for c in changes
               if c[3].startswith("autotune: candidate") and "taken back" not in c[3]]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers), numbers  # no number given twice
    assert any("not applied (threads 2 " in e.text for e in events if e.type == "warning")
    assert (settings.grad_accum, settings.value("threads")) == (2, 1)


def test_a_window_ends_halfway_when_its_rate_is_known_or_it_clearly_loses_and_runs_on_otherwise() -> None:
    """The halfway look with given step times, whatever the box's load. The start (grad_accum 4) steps steadily:
    its rate is known, it ends halfway. grad_accum 2 is as fast but noisy (3 and 5 ms in turn, noise ~0.2): it may
    yet win, so it runs its whole window. grad_accum 1 is as noisy and 5 times slower: a clear loser, it ends
    halfway. grad_accum 8 is noisy and just as fast: whole window again."""
    from engine.core import config as cfg
    from engine.training.autotune import EARLY_NOISE, MIN_TIMED
    from engine.training.autotune_search import Measure
    from engine.training.live_settings import LiveSettings

    settings = LiveSettings(cfg.load(overrides={"task": {"name": "toy"}, "train": {"batch_size": 8, "grad_accum": 4},
                                                "runtime": {"threads": 1}}), None, None, None)
    window = 12
    tuner, run = _offline_tuner(settings, settings, [], settings=["grad_accum"], warmup_steps=0, window_steps=window)
    steady, noisy = (0.004, 0.004), (0.003, 0.005)
    seconds = {4: steady, 2: noisy, 1: tuple(5 * s for s in noisy), 8: noisy}
    assert tuner.start("test") == ""
    while tuner.active:
        run.step += 1
        assert run.step < 1000
        tuner.observe(run.step, seconds[settings.grad_accum][run.step % 2], 8)
        tuner.boundary()
    ended = {row["settings"]["grad_accum"]: (row["ended"], row["steps"]) for row in tuner.table}
    assert ended == {4: ("halfway", window // 2), 2: ("", window), 1: ("halfway", window // 2),
                     8: ("", window)}, tuner.table
    best = None
    for row in tuner.table:  # the policy, row by row: halfway exactly when the rate is known or it clearly loses
        loses = best is not None and Measure(row["rate"], row["noise"]).loses_to(Measure(best["rate"], best["noise"]))
        assert (row["ended"] == "halfway") == (row["noise"] <= EARLY_NOISE or loses), (row, best)
        assert row["ended"] != "halfway" or MIN_TIMED <= row["steps"] <= window // 2
        if row["best"]:
            best = row
