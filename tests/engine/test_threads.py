"""engine.training.threads (the plan's decisions from given inputs, the cgroup quota) and engine.training.batch_source
(the measuring batch source)."""

from __future__ import annotations

import pytest
import torch

from engine.core import config as cfg
from engine.core.core_sections import RuntimeConfig
from engine.training import batch_source, threads
from engine.training.batch_source import PlannedPrefetcher
from engine.training.threads import Cores, Costs, plan

FAST = Costs(batch_s=0.0006, step_s=0.0007)  # the toy task at ~800 steps/s: the build is most of a step
DEMO = Costs(batch_s=0.030, step_s=0.060)  # SensorLM demo on CPU: long kernels


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_cores_take_the_tighter_of_affinity_and_quota():
    assert Cores(8).usable == 8
    assert Cores(8, quota=2.5).usable == 2
    assert Cores(2, quota=6.0).usable == 2
    assert Cores(4, quota=0.5).usable == 1
    assert "cgroup quota 2.5" in Cores(8, quota=2.5).describe()


def test_cgroup_v2_quota_is_the_tightest_on_the_path(tmp_path):
    root = tmp_path / "cg"
    (root / "a" / "b").mkdir(parents=True)
    (root / "cpu.max").write_text("max 100000\n")
    (root / "a" / "cpu.max").write_text("300000 100000\n")
    (root / "a" / "b" / "cpu.max").write_text("150000 100000\n")
    proc = tmp_path / "cgroup"
    proc.write_text("0::/a/b\n")
    assert threads.cgroup_quota(root, proc) == pytest.approx(1.5)
    (root / "a" / "b" / "cpu.max").write_text("max 100000\n")
    assert threads.cgroup_quota(root, proc) == pytest.approx(3.0)
    (root / "a" / "cpu.max").write_text("max 100000\n")
    assert threads.cgroup_quota(root, proc) is None


def test_cgroup_v1_quota(tmp_path):
    cpu = tmp_path / "cg" / "cpu,cpuacct" / "job"
    cpu.mkdir(parents=True)
    (cpu / "cpu.cfs_quota_us").write_text("200000\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "cgroup"
    proc.write_text("4:cpu,cpuacct:/job\n")
    assert threads.cgroup_quota(tmp_path / "cg", proc) == pytest.approx(2.0)
    (cpu / "cpu.cfs_quota_us").write_text("-1\n")
    assert threads.cgroup_quota(tmp_path / "cg", proc) is None


def test_two_cores_keep_one_as_headroom_and_measure_first():
    p = plan(Cores(2), viewer=False, costs=None, steps_left=1000)
    assert (p.threads, p.data, p.depth) == (1, "inline", 0)
    assert "measuring" in p.reason and "headroom" in p.reason


def test_one_core_never_overlaps():
    p = plan(Cores(1), viewer=True, costs=DEMO, steps_left=10**6)
    assert (p.threads, p.data) == (1, "inline")
    assert "one core" in p.reason


def test_a_quota_is_planned_with_not_the_host_cores():
    assert plan(Cores(64, quota=2.0), viewer=False, costs=None, steps_left=10).threads == 1


def test_a_viewer_gets_its_own_core_on_a_bigger_box_and_shares_headroom_on_a_small_one():
    assert plan(Cores(8), viewer=False, costs=None, steps_left=10).threads == 7
    assert plan(Cores(8), viewer=True, costs=None, steps_left=10).threads == 6
    assert plan(Cores(2), viewer=True, costs=None, steps_left=10).threads == 1


def test_fast_steps_build_inline_in_a_short_run_and_in_a_worker_in_a_long_one():
    short = plan(Cores(2), viewer=False, costs=Costs(0.004, 0.005), steps_left=500)  # 2 s of building left
    assert short.data == "inline" and "too short to repay" in short.reason
    long = plan(Cores(2), viewer=False, costs=Costs(0.004, 0.005), steps_left=1_000_000)
    assert (long.data, long.workers, long.depth, long.threads) == ("workers", 1, 2, 1)


def test_tiny_batches_stay_inline_however_long_the_run():
    p = plan(Cores(2), viewer=False, costs=FAST, steps_left=1_000_000)  # 0.6 ms: less than receiving it costs
    assert p.data == "inline" and "cost less to build than to receive" in p.reason


def test_slow_steps_in_a_short_run_use_the_builder_thread():
    p = plan(Cores(2), viewer=False, costs=DEMO, steps_left=50)  # 1.5 s of building: workers do not pay
    assert (p.data, p.depth) == ("thread", 1)


def test_cheap_batches_stay_inline():
    p = plan(Cores(16), viewer=False, costs=Costs(0.0001, 0.1), steps_left=10**6)
    assert p.data == "inline" and "< 2%" in p.reason


def test_data_bound_runs_get_enough_workers_taken_from_torch():
    p = plan(Cores(16), viewer=False, costs=Costs(0.032, 0.010), steps_left=10**6)  # build 3.2× the step
    assert (p.data, p.workers, p.threads) == ("workers", 4, 12)  # 16 - 1 headroom - 3 beyond it


def test_a_data_bound_run_on_two_cores_adds_a_worker_on_the_trainers_core():
    # The demo measured alone: build 55 ms, step 52 ms. Beside the step the build is slower still, so one worker
    # paces the run and the trainer waits; a second worker fills those waits on the trainer's core.
    p = plan(Cores(2), viewer=False, costs=Costs(0.055, 0.052), steps_left=10**6)
    assert (p.data, p.workers, p.threads, p.depth) == ("workers", 2, 1, 4)
    assert "trainer's core" in p.reason
    # Just under the step alone is still the slower side beside it (×1.15)...
    assert plan(Cores(2), viewer=False, costs=Costs(0.046, 0.052), steps_left=10**6).workers == 2
    # ...while a build well under the step keeps one worker on the headroom core, and never more than a core each.
    assert plan(Cores(2), viewer=False, costs=Costs(0.030, 0.052), steps_left=10**6).workers == 1
    assert plan(Cores(2), viewer=False, costs=Costs(0.500, 0.052), steps_left=10**6).workers == 2


def test_overrides_win():
    assert plan(Cores(2), False, FAST, 10**6, threads=2).threads == 2
    p = plan(Cores(2), False, None, 10, workers=0)
    assert (p.data, p.depth) == ("thread", 1) and "runtime.data_workers = 0" in p.reason
    assert plan(Cores(8), False, None, 10, workers=3).workers == 3
    assert plan(Cores(8), False, DEMO, 10**6, prefetch=False).data == "inline"


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now


def _source(monkeypatch, cores: Cores, build_s: float, steps_left: int = 100, **runtime):
    clock = _Clock()
    monkeypatch.setattr(batch_source, "time", clock)
    lines: list[str] = []

    def build(key):
        clock.now += build_s
        return key

    source = PlannedPrefetcher(build, lambda: ({}, None), RuntimeConfig(**runtime), steps_left=lambda: steps_left,
                               emit=lines.append, cores=cores)
    return source, clock, lines


def test_the_source_measures_then_plans_and_says_so_once(monkeypatch):
    source, clock, lines = _source(monkeypatch, Cores(2), build_s=0.010)
    try:
        assert source.plan.data == "inline" and source.depth == 0 and torch.get_num_threads() == 1
        for step in range(batch_source.MEASURE_TAKES):
            assert source.take(((1, 2, 3), step)) == ((1, 2, 3), step)
            clock.now += 0.040  # the step's compute
        assert source.plan.data == "thread" and source.depth == 1  # 40 ms steps, 10 ms builds, a short run
        source.take(((1, 2, 3), 99))
        assert len(lines) == 1 and "builder thread" in lines[0] and "batch 10 ms ÷ step 40 ms" in lines[0]
    finally:
        source.close()


def test_a_new_batch_size_measures_again(monkeypatch):
    source, clock, lines = _source(monkeypatch, Cores(2), build_s=0.010)
    try:
        for step in range(batch_source.MEASURE_TAKES + 1):
            source.take(((1, 2, 3), step))
            clock.now += 0.040
        assert source.plan.data == "thread"
        source.take(((1, 2, 3, 4, 5, 6), 50))  # the batch size changed live
        assert source.plan.data == "inline" and "measuring" in source.plan.reason
    finally:
        source.close()


def test_a_viewer_attaching_replans_the_threads(monkeypatch):
    source, clock, lines = _source(monkeypatch, Cores(8), build_s=0.0, data_workers=0)
    viewers = [0]
    source.viewers = lambda: viewers[0]
    try:
        source.take(((1,), 0))
        assert torch.get_num_threads() == 7
        viewers[0] = 1
        clock.now += batch_source.VIEWER_POLL_S + 0.1
        source.take(((1,), 1))
        assert torch.get_num_threads() == 6 and source.plan.data == "thread"
        assert any("1 more for the viewer" in line for line in lines)
    finally:
        source.close()


def test_a_toy_run_logs_its_plan():
    from engine.run.control.requests import Controls
    from engine.run.sinks import EventBus, MemorySink
    from engine.training.loop import Trainer

    config = cfg.load(task="toy", overrides={"train": {"max_steps": 12}, "evaluation": {"every": 0}})
    sink = MemorySink()
    Trainer(config, EventBus([sink]), Controls()).run()
    notes = [e.text for e in sink.drain() if e.type == "log" and e.stream == "engine"]
    threads_notes = [n for n in notes if n.startswith("threads: ")]
    assert len(threads_notes) == 1 and "batch " in threads_notes[0], notes
    assert [n for n in notes if n.startswith("allocator: ")], "the allocator setting is said too"


def test_workers_that_cannot_start_fall_back_without_ending_the_run(monkeypatch):
    from torch.utils.data import DataLoader

    def refuse(self, *args, **kwargs):
        raise RuntimeError("An attempt has been made to start a new process before the bootstrapping phase")

    monkeypatch.setattr(DataLoader, "__iter__", refuse)  # where DataLoader spawns its workers
    source, clock, lines = _source(monkeypatch, Cores(2), build_s=0.010, steps_left=10**6)
    try:
        _measure(source, clock)
        assert source.plan.data == "workers"
        source.ahead([((1, 2, 3), 7)])  # the pool cannot spawn: re-planned, not raised
        assert source.plan.data == "thread" and "could not start: RuntimeError" in source.plan.reason
        source.ahead([((1, 2, 3), 7)])
        assert source.take(((1, 2, 3), 7)) == ((1, 2, 3), 7)
        assert any("could not start" in line for line in lines)
    finally:
        source.close()


def test_a_spawn_value_error_falls_back_to_a_thread(monkeypatch):
    from torch.utils.data import DataLoader

    def refuse(self, *args, **kwargs):
        raise ValueError("bad value(s) in fds_to_keep")

    monkeypatch.setattr(DataLoader, "__iter__", refuse)  # where DataLoader spawns its workers
    source, clock, lines = _source(monkeypatch, Cores(2), build_s=0.010, steps_left=10**6)
    try:
        _measure(source, clock)
        assert source.plan.data == "workers"
        source.ahead([((1, 2, 3), 7)])
        assert source.plan.data == "thread" and "could not start: ValueError" in source.plan.reason
    finally:
        source.close()


def _measure(source, clock) -> None:
    """Feed the source the batches it measures on: 10 ms builds between 40 ms steps."""
    for step in range(batch_source.MEASURE_TAKES):
        source.take(((1, 2, 3), step))
        clock.now += 0.040
