"""The budget inside the real engine: the Trainer's live checks and samples, and the CLI's start guard."""

from __future__ import annotations

import torch

from engine import config as cfg
from engine import events as ev
from engine.control import Controls, Request
from engine.loop import Trainer
from engine.sinks import EventBus, MemorySink
from tests.conftest import run_cli


def test_trainer_refuses_a_batch_over_budget_and_accepts_a_forced_one() -> None:
    torch.set_num_threads(1)
    config = cfg.load(task="toy", overrides={"train": {"max_steps": 2, "eval_every": 0, "device": "cpu"},
                                            "budget": {"vram_gb": 0.03}})
    sink = MemorySink()
    trainer = Trainer(config, EventBus([sink]), Controls())
    trainer.setup()
    started = trainer.budget.on_start(trainer)
    assert started["budget"] and started["predicted"] <= started["budget"]
    huge = 50 * started["largest_batch"]
    trainer._apply([Request("set", name="batch_size", value=huge)])
    refused = [e for e in sink.drain() if isinstance(e, ev.Refused)]
    assert refused and "predicted peak" in refused[-1].why and str(started["largest_batch"]) in refused[-1].why
    assert trainer.batch_size == config.train.batch_size
    trainer._apply([Request("set", name="batch_size", value=huge, force=True)])
    assert trainer.batch_size == huge
    sample = trainer.budget.sample(1)
    assert isinstance(sample, ev.MemorySampled) and sample.predicted > started["predicted"]
    assert sample.allocated is None  # CPU: no allocator counter is passed off as training memory


def test_cli_refuses_to_start_with_options_and_writes_nothing(tmp_path) -> None:
    run_dir = tmp_path / "run"
    proc = run_cli("train", "--headless", "--preset", "demo", "--device", "cpu", "--vram-gb", "0.001",
                   "--run-dir", str(run_dir))
    assert proc.returncode == 2
    assert "does not fit" in proc.stderr and "--no-vram-check" in proc.stderr and "Traceback" not in proc.stderr
    assert not run_dir.exists()
