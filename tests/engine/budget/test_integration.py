"""The budget inside the real engine: the Trainer's live checks and samples, and the CLI's start guard."""

from __future__ import annotations

import pytest
import torch

from engine.core import config as cfg
from engine.run import events as ev
from engine.run.control.requests import Controls, Request
from engine.run.sinks import EventBus, MemorySink
from engine.training.loop import Trainer
from tests.conftest import run_forked


def _budgeted_trainer() -> tuple[Trainer, MemorySink, dict]:
    torch.set_num_threads(1)
    config = cfg.load(task="toy", overrides={"train": {"max_steps": 2}, "evaluation": {"every": 0},
                                            "runtime": {"device": "cpu"}, "budget": {"vram_gb": 0.03}})
    sink = MemorySink()
    trainer = Trainer(config, EventBus([sink]), Controls())
    trainer.setup()
    return trainer, sink, trainer.budget.on_start(trainer.settings)


def test_trainer_refuses_a_batch_over_budget_and_accepts_a_forced_one() -> None:
    trainer, sink, started = _budgeted_trainer()
    assert started.budget and started.predicted <= started.budget
    huge = 50 * started.largest_batch
    trainer.control.apply([Request("set", name="batch_size", value=huge)])
    refused = [e for e in sink.drain() if isinstance(e, ev.Refused)]
    assert refused and "predicted peak" in refused[-1].why and str(started.largest_batch) in refused[-1].why
    assert trainer.settings.batch_size == trainer.config.train.batch_size
    trainer.control.apply([Request("set", name="batch_size", value=huge, force=True)])
    assert trainer.settings.batch_size == huge
    forced = [e for e in sink.drain() if isinstance(e, ev.SettingChanged)][-1]
    assert forced.reason.startswith("forced past the budget check") and "predicted peak" in forced.reason
    sample = trainer.budget.sample(1)
    assert isinstance(sample, ev.MemorySampled) and sample.predicted > started.predicted
    assert sample.allocated is None  # CPU: no allocator counter is passed off as training memory


def test_a_dry_run_predicts_exactly_what_the_real_request_is_refused_with() -> None:
    trainer, sink, started = _budgeted_trainer()
    huge, fine = 50 * started.largest_batch, started.largest_batch
    trainer.control.apply([Request("set", name="batch_size", value=huge, dry_run=True),
                           Request("set", name="batch_size", value=fine, dry_run=True)])
    over, fits = [e for e in sink.drain() if isinstance(e, ev.Prediction)]
    assert trainer.settings.batch_size == trainer.config.train.batch_size, "a dry run applies nothing"
    assert not over.fits and over.refused and fits.fits and not fits.refused and fits.predicted <= fits.budget
    trainer.control.apply([Request("set", name="batch_size", value=huge)])
    refused = [e for e in sink.drain() if isinstance(e, ev.Refused)][-1]
    assert (refused.predicted, refused.budget, refused.why) == (over.predicted, over.budget, over.refused)
    assert refused.predicted > refused.budget


@pytest.mark.slow
def test_cli_refuses_to_start_with_options_and_writes_nothing(forks, tmp_path) -> None:
    run_dir = tmp_path / "run"
    proc = run_forked(forks, "train", "--headless", "--preset", "demo", "--device", "cpu", "--vram-gb", "0.001",
                      "--run-dir", str(run_dir))
    assert proc.returncode == 2
    assert "does not fit" in proc.stderr and "--no-vram-check" in proc.stderr and "Traceback" not in proc.stderr
    assert not run_dir.exists()


def test_settings_asked_together_are_judged_and_applied_as_one_change() -> None:
    # A batch the budget refuses alone fits with more accumulation beside it (smaller micro-batches): judged
    # one at a time, the batch is refused first and the pair can never be applied.
    trainer, sink, started = _budgeted_trainer()
    big = 3 * started.largest_batch
    pair = Request("set", name="batch_size", value=big, together=(("grad_accum", 8),))
    wire = Request.from_dict(pair.to_dict())
    assert wire.changes == {"batch_size": big, "grad_accum": 8} and wire.together == pair.together
    trainer.control.apply([Request("set", name="batch_size", value=big, dry_run=True),
                           Request("set", name="batch_size", value=big, dry_run=True, together=(("grad_accum", 8),))])
    alone, together = [e for e in sink.drain() if isinstance(e, ev.Prediction)]
    assert not alone.fits and together.fits and together.predicted < alone.predicted
    trainer.control.apply([wire])
    applied = [e for e in sink.drain() if isinstance(e, ev.SettingChanged)]
    assert [(e.name, e.new, e.request_id) for e in applied] == [("grad_accum", 8, None), ("batch_size", big, wire.id)]
    assert (trainer.settings.batch_size, trainer.settings.grad_accum) == (big, 8)


def test_a_together_map_is_checked_like_the_request() -> None:
    import pytest

    from engine.run.control.requests import RequestError

    base = {"v": 1, "id": "a-1", "action": "set", "name": "batch_size", "value": 8}
    for bad, says in (({"together": {"batch_size": 4}}, "repeats"), ({"together": {"lr": [1]}}, "lr must be a bool"),
                      ({"together": [1]}, "JSON object"), ({"action": "pause", "name": None, "value": None,
                                                           "together": {"lr": 0.1}}, "takes no together")):
        with pytest.raises(RequestError, match=says):
            Request.from_dict({**base, **bad})
