"""The straggler rule (torch-free): the slowest rank against the others' median, and what it costs a step."""

from __future__ import annotations

from engine.distributed.telemetry import Window, injected_delay, straggler


def _rec(rank, work):
    return {"rank": rank, "work_s": work}


def test_the_slowest_rank_is_named_with_its_cost_against_the_others_median():
    slow, median, cost = straggler([_rec(0, 0.010), _rec(1, 0.060)])
    assert (slow, median) == (1, 0.010) and abs(cost - 0.050) < 1e-12
    slow, median, cost = straggler([_rec(0, 0.10), _rec(1, 0.11), _rec(2, 0.30), _rec(3, 0.12)])
    assert (slow, median) == (2, 0.11) and abs(cost - 0.19) < 1e-12


def test_no_straggler_within_noise_and_none_without_measurements():
    assert straggler([_rec(0, 0.100), _rec(1, 0.110)])[0] is None
    assert straggler([_rec(0, None), _rec(1, 0.1)]) == (None, 0.1, None)


def test_window_means_reset_after_each_record_and_an_empty_window_says_none():
    w = Window()
    w.add(0.2, 0.1, 0.01)
    w.add(0.4, 0.3, 0.03)
    first = w.record(0, 2, {})
    assert [round(first[k], 9) for k in ("step_s", "work_s", "data_s")] == [0.3, 0.2, 0.02]
    assert w.record(0, 2, {})["work_s"] is None


def test_the_slow_rank_hook_reads_only_its_own_rank(monkeypatch):
    monkeypatch.setenv("SENSORLM_TUI_SLOW_RANK", "1:0.05")
    assert (injected_delay(0), injected_delay(1)) == (0.0, 0.05)
    monkeypatch.setenv("SENSORLM_TUI_SLOW_RANK", "garbage")
    assert injected_delay(1) == 0.0
