"""A new RunStarted (a resume) opens a new generation: ended state, rates, ETA and controls start afresh.

A resumed run must be controllable from any dashboard: without a new generation per RunStarted, after train → abort →
`train --resume`, the viewer kept "aborted at step 30", ETA "done" and refused every key. Both ways a
viewer folds events are checked: live batches and a whole events.jsonl history (attach, attach's `r`).
"""

from __future__ import annotations

from pathlib import Path

from engine.run import events as ev
from tests.tui.tui_helpers import logged
from tui.model.dashboard import RunModel
from tui.widgets.header import RunHeader


def _aborted_then_resumed() -> list[ev.Event]:
    """Gen 1: 30 steps at 1 step/s, aborted. 1000 s later gen 2 resumes from 30 at 4 steps/s for 60 steps."""
    out: list[ev.Event] = [ev.RunStarted(name="r", total_steps=200, t=0.0)]
    out += [ev.StepLogged(step=s, loss=1.0, t=float(s)) for s in range(1, 31)]
    out += [ev.StateChanged(state="aborting", step=30, t=30.5),
            ev.RunFinished(status="aborted", steps=30, exit_code=0, t=31.0)]
    out += [ev.RunStarted(name="r", total_steps=200, start_step=30, resumed_from="ckpt/last", t=1000.0)]
    out += [ev.StepLogged(step=30 + i, loss=0.5, t=1000.0 + 0.25 * i) for i in range(1, 61)]
    return out


def _check_new_generation(m: RunModel) -> None:
    assert m.generation == 2
    assert not m.ended and m.finished is None, "the old RunFinished no longer ends the run"
    assert m.state == "running"
    assert abs(m.steps_per_s() - 4.0) < 1e-9, f"steps/s {m.steps_per_s()} mixes the old generation in"
    assert abs(m.eta_seconds() - (200 - 90) / 4.0) < 1e-6
    assert m.resumed_from_step == 30
    title, badge, _ = RunHeader.content(m)
    assert "resumed from step 30" in title and badge.strip() == "RUNNING"


def test_live_viewer_resets_on_a_resume() -> None:
    m = RunModel()
    events = _aborted_then_resumed()
    m.ingest(events[:33])
    m.set_liveness("aborted")  # the session's poll saw the first engine exit
    assert m.ended
    for i in range(33, len(events), 9):
        m.ingest(events[i:i + 9])
    _check_new_generation(m)


def test_history_of_a_resumed_run_is_a_live_generation(tmp_path: Path) -> None:
    m = RunModel()
    m.ingest(logged(_aborted_then_resumed(), tmp_path))
    _check_new_generation(m)


def test_before_the_resumed_engine_logs_a_step_the_progress_shows_the_resume_step() -> None:
    m = RunModel()
    m.ingest(_aborted_then_resumed()[:34])
    assert m.step == 30 and m.steps_per_s() is None and m.eta_seconds() is None


def test_rates_restart_after_a_batch_change_and_after_a_pause() -> None:
    m = RunModel()
    m.ingest([ev.RunStarted(name="r", total_steps=1000, t=0.0)])
    m.ingest([ev.StepLogged(step=s, loss=1.0, t=float(s)) for s in range(1, 101)])  # 1 step/s
    m.ingest([ev.SettingChanged(name="batch_size", old=16, new=64, step=100, t=100.5)])
    m.ingest([ev.StepLogged(step=100 + i, loss=1.0, t=100.5 + 4.0 * i) for i in range(1, 21)])  # 0.25 steps/s
    assert abs(m.steps_per_s() - 0.25) < 1e-9
    assert abs(m.eta_seconds() - (1000 - 120) / 0.25) < 1e-6
    m.ingest([ev.StateChanged(state="paused", step=120, t=200.0), ev.StateChanged(state="running", step=120, t=900.0)])
    m.ingest([ev.StepLogged(step=120 + i, loss=1.0, t=900.0 + 4.0 * i) for i in range(1, 4)])
    assert abs(m.steps_per_s() - 0.25) < 1e-9, "the 700 s pause is not part of the pace"
    m.ingest([ev.SettingChanged(name="lr", old=1e-3, new=5e-4, step=123, t=913.0)])
    assert abs(m.steps_per_s() - 0.25) < 1e-9, "an LR change keeps the pace"
