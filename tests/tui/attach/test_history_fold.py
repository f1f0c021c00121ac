"""Opening a long run cheaply: History.others() gives the non-step events exactly as iterating would."""

from __future__ import annotations

from pathlib import Path

from bench.open_run import write_run
from engine import events as ev
from engine.history import read_history


def test_others_equals_filtering_the_whole_history(tmp_path: Path) -> None:
    path = write_run(tmp_path / "r", 3000)
    with open(path, "a", encoding="utf-8") as out:
        # A step of another shape (decoded through the per-line path, not a column block) must be left out too.
        out.write(ev.to_json(ev.StepLogged(step=3001, loss=1.0, components={"mse": 1.0, "new": 2.0})) + "\n")
        out.write(ev.to_json(ev.Warning(text="after the odd step", step=3001)) + "\n")
        out.write('{"type":"step","t":1.0,"st')  # a torn last line
    history = read_history(path)
    others = history.others("step")
    assert others == [e for e in history if e.type != "step"]
    assert others[-1] == ev.Warning(text="after the odd step", step=3001, t=others[-1].t)
    assert {e.type for e in others} == {"schema", "run_started", "memory", "system"} | {"warning"}
