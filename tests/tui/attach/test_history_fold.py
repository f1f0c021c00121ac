"""Opening a long run cheaply: History.others() gives the non-step events exactly as iterating would."""

from __future__ import annotations

from pathlib import Path

from bench.open_run import write_run
from engine.run import events as ev
from engine.run.history import read_history


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

    from tui.model.dashboard import RunModel

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
    assert ([(e.kind, e.text, e.step) for e in columnar.take_log()]
            == [(e.kind, e.text, e.step) for e in plain.take_log()])
    assert columnar.steps_per_s() == plain.steps_per_s() and columnar.eta_seconds() == plain.eta_seconds()
    assert columnar.summary() == plain.summary()


def _long_run(path: Path, steps: int) -> Path:
    """A run whose steps were logged twice in part (crash, resume from an earlier checkpoint), with NaN losses
    (skipped steps) and a loss component that appears late: the cases a tail's fold could get wrong."""
    import math

    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [ev.RunStarted(name="long", task="toy", total_steps=steps)]
    crash, resume = steps * 2 // 3, steps // 2

    def step(s: int, attempt: int) -> ev.StepLogged:
        loss = float("nan") if s % 997 == 0 else 1.0 + math.sin(s / 50.0) + 0.1 * attempt + 1e-4 * s
        components = {"mse": loss} if s < steps // 3 else {"mse": loss, "kl": 0.5 * loss}
        return ev.StepLogged(t=1.7e9 + s + attempt * steps, step=s, loss=loss, lr=1e-3, grad_norm=s % 7,
                             samples_per_s=100.0, components=components, skipped=loss != loss)

    lines += [step(s, 0) for s in range(1, crash + 1)]
    lines += [ev.RunStarted(name="long", task="toy", total_steps=steps, start_step=resume, resumed_from="ckpt")]
    lines += [step(s, 1) for s in range(resume + 1, steps + 1)]
    lines += [ev.EvalDone(step=steps, val_loss=0.5, metrics={"val_loss": 0.5}, primary="val_loss")]
    path.write_text("".join(ev.to_json(e) + "\n" for e in lines))
    return path


def test_the_preview_is_the_full_fold_s_tail(tmp_path: Path) -> None:
    """The newest rows folded alone (EMAs warmed up on the points before them) equal the full fold's rows."""
    import numpy as np

    from tui.model.history_fold import PREVIEW_ROWS, HistoryFold, deferred_fold

    history = read_history(_long_run(tmp_path / "r" / "events.jsonl", 12_000))
    fold = deferred_fold(history, 1 << 20)
    assert fold is not None and fold.rows == 12_000  # the superseded attempts of 6001..8000 are gone
    names = ["grad_norm", "lr", "samples_per_s", "steps_per_s", "components.mse", "components.kl"]
    preview, full = fold.preview(names), fold.finish(names)
    tail, every = preview.steps.view(), full.steps.view()
    assert len(tail) == PREVIEW_ROWS and len(every) == 12_000
    assert np.array_equal(tail[:, :2], every[-PREVIEW_ROWS:, :2], equal_nan=True)
    assert np.isnan(tail[:, 1]).any(), "the tail holds skipped steps"
    assert np.allclose(tail[:, 2:], every[-PREVIEW_ROWS:, 2:], rtol=1e-12, atol=0, equal_nan=True)
    for a, b in zip(preview.ema, full.ema):
        assert a.count == b.count and np.isclose(a.mean, b.mean, rtol=1e-12, atol=0)
    assert list(preview.scalars) == list(full.scalars) == ["grad_norm", "lr", "samples_per_s", "steps_per_s", "mse",
                                                           "kl"]
    for name, ring in preview.scalars.items():
        assert np.array_equal(ring.view(), full.scalars[name].view()[-PREVIEW_ROWS:], equal_nan=True), name
    short = read_history(_long_run(tmp_path / "s" / "events.jsonl", 3000))
    assert deferred_fold(short, 1 << 20) is None and not HistoryFold(short, 1 << 20).deferred


def test_a_model_shown_from_the_preview_then_completed_equals_the_full_fold(tmp_path: Path) -> None:
    """What the first frame draws from (the preview) and what the model holds once the worker's fold is adopted."""
    import numpy as np

    from tui.model.dashboard import RunModel
    from tui.model.history_fold import PREVIEW_ROWS, deferred_fold

    path = write_run(tmp_path / "r", 12_000)
    history = read_history(path)
    full, shown = RunModel(), RunModel()
    full.ingest(history)
    fold = deferred_fold(history, shown.capacity)
    assert shown.ingest_history(history, fold) is fold and shown.history_loading
    assert len(shown.steps) == PREVIEW_ROWS and len(full.steps) == 12_000
    assert np.allclose(shown.steps.view(), full.steps.view()[-PREVIEW_ROWS:], rtol=1e-12, atol=0)
    # Everything else the panels read is complete already.
    for name in ("step", "total_steps", "state", "last_t", "evals", "last_memory", "system", "started"):
        assert getattr(shown, name) == getattr(full, name), name
    assert np.array_equal(shown.memory.view(), full.memory.view(), equal_nan=True) and len(shown.memory) == 120
    assert shown.train_names() == full.train_names() and shown.choices() == full.choices()
    assert shown.steps_per_s() == full.steps_per_s() and shown.summary() == full.summary()
    assert [(e.kind, e.text) for e in shown.take_log()] == [(e.kind, e.text) for e in full.take_log()]
    assert not shown.adopt(deferred_fold(history, shown.capacity)), "another fold is not this model's"
    fold.finish()
    charts = shown.versions["charts"]
    assert shown.adopt(fold) and not shown.history_loading and shown.versions["charts"] > charts
    assert np.array_equal(shown.steps.view(), full.steps.view(), equal_nan=True)
    for name, ring in full.scalars.items():
        assert np.array_equal(shown.scalars[name].view(), ring.view(), equal_nan=True), name
    for model in (shown, full):  # live steps continue the full rings and their EMAs
        model.ingest([ev.StepLogged(step=12_001, loss=0.1)])
    assert shown.steps.column(0)[-2:].tolist() == [12_000, 12_001]
    assert np.array_equal(shown.steps.view(), full.steps.view(), equal_nan=True)


def test_a_tail_read_s_preview_is_the_full_fold_s_tail(tmp_path: Path) -> None:
    """The first open of a long log decodes only its newest steps: their preview still equals the full fold."""
    import numpy as np

    from tui.model.dashboard import RunModel
    from tui.model.history_fold import PREVIEW_ROWS, TAIL_STEPS, deferred_fold

    path = _long_run(tmp_path / "r" / "events.jsonl", 16_000)
    tail = read_history(path, tail_steps=TAIL_STEPS)
    assert tail.steps_left_out > 0
    full, shown = RunModel(), RunModel()
    full.ingest(read_history(path, index=False))
    fold = deferred_fold(tail, shown.capacity)
    assert shown.ingest_history(tail, fold) is fold and len(shown.steps) == PREVIEW_ROWS
    assert np.array_equal(shown.steps.view()[:, :2], full.steps.view()[-PREVIEW_ROWS:, :2], equal_nan=True)
    assert np.allclose(shown.steps.view(), full.steps.view()[-PREVIEW_ROWS:], rtol=1e-12, atol=0, equal_nan=True)
    assert shown.evals == full.evals and shown.step == full.step
    fold.finish()
    assert shown.adopt(fold) and list(shown.scalars) == list(full.scalars)
    assert np.array_equal(shown.steps.view(), full.steps.view(), equal_nan=True)
