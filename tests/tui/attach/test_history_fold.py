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


def test_model_from_columns_equals_model_from_every_event(tmp_path: Path) -> None:
    """RunModel folds a History's steps from its columns; what it shows must not differ from event-by-event."""
    import numpy as np

    from tui.model import RunModel

    path = write_run(tmp_path / "r", 20_000)  # an eval at 10k and 20k, memory/system samples every 100
    with open(path, "a", encoding="utf-8") as out:
        for event in (ev.StateChanged(state="paused", step=20_000), ev.SettingChanged(name="lr", old=1e-3, new=5e-4,
                      step=20_000, request_id="1-1"), ev.StateChanged(state="running", step=20_000),
                      ev.StepLogged(step=20_001, loss=float("nan"), skipped=True),
                      ev.CheckpointSaved(step=20_001, path="ckpt/last.safetensors", kind="manual"),
                      ev.StepLogged(step=20_002, loss=0.2, lr=5e-4, batch_size=32)):
            out.write(ev.to_json(event) + "\n")
    history = read_history(path)
    columnar, plain = RunModel(), RunModel()
    columnar.ingest(history)
    plain.ingest(list(history))
    a, b = columnar.steps.view(), plain.steps.view()
    assert np.array_equal(a[:, :2], b[:, :2], equal_nan=True)  # step, raw loss: identical
    # The EMAs went through ema_extend in one piece vs. in runs between other events: same to float rounding.
    assert np.allclose(a[:, 2:], b[:, 2:], rtol=1e-9, atol=0, equal_nan=True)
    assert columnar.last_step == plain.last_step and columnar.last_step.step == 20_002
    for name in ("state", "last_t", "evals", "checkpoints", "markers", "last_memory", "system", "started"):
        assert getattr(columnar, name) == getattr(plain, name), name
    assert len(columnar.memory) == len(plain.memory)
    assert [(e.kind, e.text, e.step) for e in columnar.take_log()] == [(e.kind, e.text, e.step) for e in plain.take_log()]
    assert columnar.steps_per_s() == plain.steps_per_s() and columnar.eta_seconds() == plain.eta_seconds()
    assert columnar.summary() == plain.summary()
