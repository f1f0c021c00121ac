"""A resumed run redoes the steps after its checkpoint: the model keeps only the latest attempt of each."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.run import events as ev
from tests.tui.tui_helpers import logged
from tui.model.dashboard import RunModel


def _run_events() -> list[ev.Event]:
    out: list[ev.Event] = [ev.RunStarted(name="r", total_steps=40)]
    out += [ev.StepLogged(step=s, loss=1.0 + s) for s in range(1, 31)]          # crashed at 30
    out += [ev.EvalDone(step=20, val_loss=0.5), ev.EvalDone(step=30, val_loss=0.4)]
    out += [ev.RunStarted(name="r", total_steps=40, start_step=20, resumed_from="ckpt")]
    out += [ev.StepLogged(step=s, loss=-float(s)) for s in range(21, 41)]        # resumed from 20
    out += [ev.EvalDone(step=30, val_loss=0.3), ev.EvalDone(step=40, val_loss=0.2)]
    return out


def _check(model: RunModel) -> None:
    steps, loss = model.series.window("loss", 0, 100)
    assert steps.tolist() == list(range(1, 41))
    assert loss[:20].tolist() == [1.0 + s for s in range(1, 21)]
    assert loss[20:].tolist() == [-float(s) for s in range(21, 41)]
    fresh = RunModel()
    fresh.ingest([ev.StepLogged(step=int(s), loss=float(v)) for s, v in zip(steps, loss)])
    for name in ("loss", "grad_norm", "lr"):
        kept, once = model.step_envelope(name, 1, 40, 13), fresh.step_envelope(name, 1, 40, 13)
        assert np.array_equal(kept.min, once.min, equal_nan=True) and np.array_equal(kept.max, once.max,
                                                                                      equal_nan=True), name
    assert [e.step for e in model.evals] == [20, 30, 40]
    assert model.evals[1].val_loss == 0.3


def test_live_events_rewind_on_resume() -> None:
    model = RunModel()
    events = _run_events()
    for i in range(0, len(events), 7):  # arrive in batches, as from the pump
        model.ingest(events[i:i + 7])
    _check(model)


def test_history_file_rewinds_on_resume(tmp_path: Path) -> None:
    model = RunModel()
    model.ingest(logged(_run_events(), tmp_path))
    _check(model)
