"""Start-up phases: the engine reports each as it begins, before RunStarted and the first step."""

from __future__ import annotations

from pathlib import Path

from engine.app.main import run_prepared
from engine.app.prepare import prepare
from engine.core.cli_args import OneLineParser, add_train_arguments
from engine.run import events as ev


def test_phases_come_before_the_first_step_in_order(tmp_path: Path) -> None:
    parser = OneLineParser(prog="t")
    add_train_arguments(parser)
    prepared = prepare(parser.parse_args(["--task", "toy", "--threads", "1", "--max-steps", "2",
                                          "--run-dir", str(tmp_path / "r")]))
    assert run_prepared(prepared, console=False, install_signals=False, serve_controls=False) == 0
    events = [e for e in map(ev.from_json, (tmp_path / "r" / "events.jsonl").read_text().splitlines()) if e]
    types = [e.type for e in events]
    phases = [e for e in events if e.type == "phase"]
    assert [p.phase for p in phases] == ["importing torch", "predicting memory", "building data and model",
                                         "first evaluation, first step"]
    assert all(a.t <= b.t for a, b in zip(phases, phases[1:])), "stamped when each began"
    assert types.index("phase") < types.index("run_started") < types.index("step")
    assert phases[2].detail.startswith("toy/")
