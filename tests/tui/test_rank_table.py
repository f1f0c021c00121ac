"""The rank table in the system panel: a row per rank, the engine's straggler marked with its cost."""

from __future__ import annotations

import re

from engine.run import events as ev
from tui.model.dashboard import RunModel
from tui.widgets.system import SystemPanel


def _ranks(straggler):
    rows = [{"rank": 1, "step": 40, "step_s": 0.12, "work_s": 0.08, "data_s": 0.002, "allocated": None, "rss": 3 << 20},
            {"rank": 0, "step": 40, "step_s": 0.12, "work_s": 0.02, "data_s": 0.001, "allocated": 5 << 20,
             "rss": None}]
    return ev.RanksSampled(step=40, ranks=rows, straggler=straggler, median_work_s=0.02,
                           cost_s=0.06 if straggler is not None else 0.0)


def test_system_panel_lists_every_rank_and_marks_the_straggler():
    m = RunModel()
    m.ingest([ev.SystemSampled(cpu_percent=50.0, ram_used=1 << 30, ram_total=2 << 30), _ranks(1)])
    lines = [re.sub(r"\[[^\]]*\]", "", line) for line in SystemPanel().content(m).splitlines()]  # markup off
    rows = [line for line in lines if line.split()[:1] in (["0"], ["1"])]
    assert len(rows) == 2 and rows[0].split()[0] == "0"  # in rank order
    assert "slow" in rows[1] and "slow" not in rows[0]
    assert any("rank 1 costs the job 60ms a step" in line for line in lines)


def test_no_straggler_marks_nothing_and_one_process_shows_no_table():
    m = RunModel()
    m.ingest([ev.SystemSampled(cpu_percent=50.0, ram_used=1 << 30, ram_total=2 << 30)])
    assert "rank" not in SystemPanel().content(m)
    m.ingest([_ranks(None)])
    text = SystemPanel().content(m)
    assert "rank  step" in text and "slow" not in text and "costs" not in text
