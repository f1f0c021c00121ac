"""Trainer mechanics in-process with the toy task, through public methods: data order, accumulation, clipping,
precision, schedules, checkpoints."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from engine.core import config as cfg
from engine.optim.schedule import lr_at
from engine.run.control.requests import Controls, set_value
from engine.run.sinks import EventBus, MemorySink
from engine.training.loop import Trainer
from engine.training.sample_order import SampleOrder

torch.set_num_threads(1)


def _trainer(tmp_path=None, **sections) -> tuple[Trainer, MemorySink]:
    """A set-up toy Trainer: 10 steps, no evaluation, ``sections`` (section → fields) laid over that."""
    config = cfg.load(task="toy", overrides=cfg.deep_merge({"train": {"max_steps": 10}, "evaluation": {"every": 0}},
                                                           sections))
    sink = MemorySink()
    trainer = Trainer(config, EventBus([sink]), Controls(), checkpoint_dir=tmp_path)
    trainer.setup()
    return trainer, sink


def test_batch_size_change_neither_replays_nor_skips() -> None:
    trainer, _ = _trainer(train={"batch_size": 7})
    first = trainer.order.peek([22])[0]
    trainer.train_step()
    trainer.train_step()
    trainer.control.apply([set_value("batch_size", 3)])
    trainer.train_step()
    assert trainer.order.state_dict() == {"epoch": 0, "position": 17}
    assert trainer.order.take(5) == first[17:22], "the next samples are the ones after the 17 already read"


def test_sample_order_crosses_into_the_next_permutation() -> None:
    order = SampleOrder(10, seed=3)
    first = order.take(6) + order.take(6)
    assert sorted(first[:10]) == list(range(10)) and order.state_dict() == {"epoch": 1, "position": 2}
    assert first[10:] == [int(i) for i in order.shard(1)[:2]]


def test_sample_order_world_1_is_the_seeded_permutation_of_today() -> None:
    order = SampleOrder(1000, seed=7)
    assert order.take(1000) == [int(i) for i in np.random.default_rng((7, 0)).permutation(1000)]


@pytest.mark.parametrize("position", [0, 1, 17, 63])
def test_sample_order_resumes_exactly_at_any_position(position: int) -> None:
    whole = SampleOrder(64, seed=5)
    whole.take(64 + position)
    expected = whole.take(40)
    resumed = SampleOrder(64, seed=5)
    resumed.load_state_dict(json.loads(json.dumps(whole_state(64, 5, 64 + position))))
    assert resumed.take(40) == expected


def whole_state(size: int, seed: int, consumed: int) -> dict:
    order = SampleOrder(size, seed)
    order.take(consumed)
    return order.state_dict()


def test_sample_order_shards_are_disjoint_and_cover_the_epoch() -> None:
    world, size = 4, 48
    shards = [SampleOrder(size, seed=1, rank=r, world=world) for r in range(world)]
    taken = [s.take(size // world) for s in shards]
    assert all(s.state_dict() == {"epoch": 1, "position": 0} for s in shards)
    assert sorted(i for part in taken for i in part) == list(range(size))
    assert all(set(a).isdisjoint(b) for n, a in enumerate(taken) for b in taken[n + 1:])
    uneven = [SampleOrder(50, seed=1, rank=r, world=world) for r in range(world)]
    assert {len(s.shard(0)) for s in uneven} == {12}, "every rank steps the same number of times"


def test_sample_order_refuses_positions_that_are_not_in_it() -> None:
    order = SampleOrder(10, seed=1)
    for bad in ({"epoch": 0, "position": 10}, {"epoch": -1, "position": 0}, {"epoch": "0", "position": 0},
                {"epoch": 0, "position": True}):
        with pytest.raises(ValueError):
            order.load_state_dict(bad)
    assert order.state_dict() == {"epoch": 0, "position": 0}


def test_grad_accumulation_matches_one_big_batch() -> None:
    losses = {}
    for accum in (1, 4):
        trainer, sink = _trainer(train={"batch_size": 16, "grad_accum": accum}, optimizer={"clip_grad_norm": 0})
        for _ in range(3):
            trainer.train_step()
            trainer.log_step()
        losses[accum] = [e.loss for e in sink.drain() if e.type == "step"]
    assert np.allclose(losses[1], losses[4], rtol=1e-4), losses


def test_clipping_is_applied() -> None:
    trainer, _ = _trainer(optimizer={"clip_grad_norm": 1e-3, "lr": 1.0, "weight_decay": 0.0},
                          schedule={"kind": "constant", "warmup_frac": 0.0})
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train_step()
    grads_norm = torch.sqrt(sum((p.grad.detach() ** 2).sum() for p in trainer.model.parameters()))
    assert float(grads_norm) <= 1e-3 * 1.01, "gradients must be scaled to the clip norm before the step"
    assert any(not torch.equal(a, p) for a, p in zip(before, trainer.model.parameters()))


def test_a_groups_lr_mult_scales_the_scheduled_lr() -> None:
    from engine.optim.optimization import Optimization

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    config = cfg.load(task="toy", overrides={"optimizer": {"lr": 0.1},
                                            "schedule": {"kind": "cosine", "warmup_frac": 0.5}})
    groups = [{"params": list(model[0].parameters())}, {"params": list(model[1].parameters()), "lr_mult": 16.0}]
    optim = Optimization(config.optimizer, config.schedule, "fp32", model, groups, torch.device("cpu"), total_steps=10)
    model(torch.ones(2, 4)).sum().backward()
    _, lr, _ = optim.step(1, torch.tensor(1.0), {}, lambda finite: False)
    assert 0 < lr < 0.1  # still warming up
    assert [g["lr"] for g in optim.optimizer.param_groups] == [lr, 16.0 * lr]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_reduced_precision_trains_on_cpu(precision: str) -> None:
    trainer, sink = _trainer(runtime={"precision": precision}, train={"max_steps": 5})
    for _ in range(5):
        trainer.train_step()
        trainer.log_step()
    steps = [e for e in sink.drain() if e.type == "step"]
    assert len(steps) == 5 and all(math.isfinite(e.loss) for e in steps)
    assert trainer.optim.scaler.is_enabled() == (precision == "fp16")


def test_schedules_warm_up_and_end_where_documented() -> None:
    total = 100
    for kind in ("constant", "cosine", "rsqrt", "onecycle"):
        values = [lr_at(s, total, 1.0, kind, 0.1, cooldown_frac=0.2, min_lr_frac=0.05) for s in range(total)]
        assert values[0] == pytest.approx(0.1) and max(values) == pytest.approx(1.0)
        assert all(v > 0 for v in values[:-1])
    assert lr_at(99, total, 1.0, "cosine", 0.1, min_lr_frac=0.05) == pytest.approx(0.05)
    assert lr_at(99, total, 1.0, "rsqrt", 0.1, cooldown_frac=0.2) == pytest.approx(1 / 20 * math.sqrt(10 / 100))
    assert lr_at(50, total, 1.0, "constant", 0.1) == 1.0


def test_keep_last_step_checkpoints(tmp_path) -> None:
    config = cfg.load(task="toy", overrides={"train": {"max_steps": 12}, "evaluation": {"every": 0},
                                             "checkpoint": {"every_steps": 3, "keep_last": 2}})
    outcome = Trainer(config, EventBus(), Controls(), checkpoint_dir=tmp_path).run()
    assert outcome.status == "finished"
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-00000009.safetensors",
                                                               "step-00000012.safetensors"]


def test_a_failed_final_checkpoint_is_not_a_clean_exit(tmp_path, monkeypatch) -> None:
    from engine.checkpoint import format as ckpt_module
    from engine.checkpoint import store

    real_write = ckpt_module.timed_write
    # a good checkpoint at step 3, then the disk fills up
    trainer, sink = _trainer(tmp_path, train={"max_steps": 6}, checkpoint={"every_steps": 3})

    def write(path, tensors, meta, keep_previous=False, before_commit=None):
        if meta["step"] >= 6:
            raise ckpt_module.CheckpointWriteError(f"{path}: No space left on device")
        return real_write(path, tensors, meta, keep_previous, before_commit)

    monkeypatch.setattr(ckpt_module, "timed_write", write)
    outcome = trainer.run()
    finished = [e for e in sink.drain() if e.type == "run_finished"][-1]
    assert outcome.exit_code == 1 and finished.exit_code == 1
    assert "final checkpoint FAILED (" in finished.reason and "No space left on device" in finished.reason
    assert f"newest good checkpoint {tmp_path / 'last.safetensors'}" in finished.reason
    assert store.load_latest(tmp_path).meta["step"] == 3


def test_nan_policy_skip_says_how_many_steps_it_skipped_in_a_row() -> None:
    """Under nan_policy=skip the patience warning said "0 consecutive non-finite steps": the count was reset
    before the message read it."""
    from engine.training.policies import NanGuard, NanPolicy

    policy = NanPolicy("skip", NanGuard(patience=3))
    decisions = [policy.record(skipped=True) for _ in range(3)]
    assert decisions == ["warn", "warn", "skip"]
    event, stop = policy.respond("skip", 7, rollback=lambda: None, optim=None)
    assert stop == "" and event.text.startswith("3 consecutive non-finite steps; still skipping")
    assert [policy.record(skipped=True) for _ in range(3)] == ["warn", "warn", "skip"]  # counts afresh


def test_a_two_rank_position_converts_exactly_for_one_rank_and_back() -> None:
    # Two ranks that each read 6 samples of their shard have read order[:12] together.
    assert SampleOrder.state_for_world({"epoch": 1, "position": 6, "world": 2}, 1) == {"epoch": 1, "position": 12}
    assert SampleOrder.state_for_world({"epoch": 1, "position": 12}, 2) == {"epoch": 1, "position": 6}
    with pytest.raises(ValueError, match="world"):
        SampleOrder.state_for_world({"epoch": 0, "position": 0, "world": 0}, 1)
