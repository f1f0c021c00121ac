"""SensorLMTask: deterministic batches, state round trip, losses and metrics, live settings, presets."""

from __future__ import annotations

import json

import pytest
import torch

from engine.core.config import load
from engine.core.registry import load_task_class
from engine.tasks.protocol import TaskError
from engine.tasks.sensorlm import SensorLMTask

torch.set_num_threads(1)

SMALL = {"data": {"minutes": 240, "channels": 8, "train_samples": 1000, "val_samples": 8},
         "model": {"dim": 32, "depth": 1, "heads": 4, "patch_time": 30, "patch_channels": 4, "text_dim": 32,
                   "text_heads": 4, "embed_dim": 16, "max_caption_tokens": 40, "vocab_size": 256}}


class _Small(SensorLMTask):
    FIT_SAMPLES = 24  # keep setup fast in tests


def _task(**extra) -> SensorLMTask:
    overrides = json.loads(json.dumps(SMALL))
    for section, values in extra.items():
        overrides.setdefault(section, {}).update(values)
    task = _Small(load(preset="demo", overrides={"sensorlm": overrides}))
    task.setup()
    return task


@pytest.fixture(scope="module")
def task() -> SensorLMTask:
    return _task()


def test_registry_and_class_facts():
    assert load_task_class("sensorlm") is SensorLMTask
    assert SensorLMTask.name == "sensorlm"
    from engine.core.registry import get_spec
    from engine.tasks.sensorlm.model import BACKENDS

    settings = get_spec("sensorlm").capabilities.settings
    assert {s.name for s in settings} == {"attn_backend", "attn_chunk", "activation_checkpointing"}
    assert get_spec("sensorlm").capabilities.setting("attn_backend").choices == BACKENDS


def test_batches_are_deterministic(task):
    a = task.make_batch([3, 7, 11], step=5, train=True)
    b = task.make_batch([3, 7, 11], step=5, train=True)
    assert a.keys() == {"x", "valid", "patch_mask", "tokens"}
    for k in a:
        assert torch.equal(a[k], b[k])
    assert a["x"].shape == (3, 240, 8) and a["patch_mask"].shape == (3, 16) and a["tokens"].shape == (3, 40)
    assert (a["patch_mask"].sum(1) == 8).all()  # mask_ratio 0.5 of 16 patches, exactly
    assert not torch.equal(task.make_batch([3], 6, True)["patch_mask"], task.make_batch([3], 5, True)["patch_mask"])
    # Validation masks do not depend on the step, and validation windows are not training windows.
    assert torch.equal(task.make_batch([0], 1, False)["patch_mask"], task.make_batch([0], 9, False)["patch_mask"])
    assert not torch.equal(task.make_batch([0], 0, False)["x"], task.make_batch([0], 0, True)["x"])
    assert (a["x"][~a["valid"]] == 0).all() and torch.isfinite(a["x"]).all()
    assert task.val_indices() == list(range(8)) and task.train_size() == 1000


def test_state_round_trip(task):
    state = json.loads(json.dumps(task.state_dict()))
    again = _Small(task.config)
    again.FIT_SAMPLES = 3  # a restored task must not refit: different fit data would change the stats
    again.setup(state)
    assert again.tokenizer.words == task.tokenizer.words
    assert (again.mean == task.mean).all() and (again.std == task.std).all()
    for k, v in task.make_batch([1, 2], 3, True).items():
        assert torch.equal(v, again.make_batch([1, 2], 3, True)[k])
    bad = dict(state, norm=dict(state["norm"], channels=["x"] * 8))
    with pytest.raises(TaskError, match="channels"):
        _Small(task.config).setup(bad)
    with pytest.raises(TaskError):
        _Small(task.config).setup({"version": 7})


def test_loss_components_and_metrics(task):
    torch.manual_seed(0)
    model = task.build_model()
    batch = task.make_batch(list(range(4)), 0, True)
    total, parts = task.loss(model, batch, 0)
    assert parts.keys() == {"contrastive", "caption", "recon"}
    assert all(not v.requires_grad for v in parts.values())
    assert torch.isclose(total, sum(parts.values()))
    total.backward()
    metrics = task.eval_batch(model, task.make_batch([0, 1, 2, 3], 0, False))
    for key in ("val_loss", "val_contrastive", "val_caption", "val_recon", "psnr_db", "retrieval_top1",
                "token_accuracy"):
        assert key in metrics and isinstance(metrics[key], float)
    assert 5 < metrics["psnr_db"] < 30
    assert metrics["retrieval_chance"] == 0.25


def test_siglip_and_weights():
    task = _task(model={"contrastive": "siglip", "w_caption": 0.0, "w_recon": 2.0})
    torch.manual_seed(0)
    model = task.build_model()
    total, parts = task.loss(model, task.make_batch([0, 1, 2], 0, True), 0)
    assert torch.isclose(total, parts["contrastive"] + 2 * parts["recon"])


def test_apply_setting_switches_backend_without_changing_outputs(task):
    torch.manual_seed(0)
    model = task.build_model()
    model.eval()
    batch = task.make_batch([0, 1], 0, False)
    ref = task.eval_batch(model, batch)
    for name, value in (("attn_backend", "math"), ("attn_chunk", 3), ("attn_backend", "chunked"),
                        ("attn_backend", "sdpa")):
        task.apply_setting(model, name, value)
        got = task.eval_batch(model, batch)
        assert got["val_loss"] == pytest.approx(ref["val_loss"], rel=1e-5)
    assert model.attn_backend == "sdpa" and model.encoder.blocks[0].attn.chunk == 3
    with pytest.raises(TaskError):
        task.apply_setting(model, "attn_backend", "flash")
    with pytest.raises(TaskError):
        task.apply_setting(model, "attn_chunk", 0)
    with pytest.raises(TaskError):
        task.apply_setting(model, "dropout", 0.1)


def test_training_steps_reduce_the_loss(task):
    torch.manual_seed(0)
    model = task.build_model()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batch = task.make_batch(list(range(8)), 0, True)
    first = None
    for step in range(25):
        total, parts = task.loss(model, batch, step)
        opt.zero_grad()
        total.backward()
        opt.step()
        first = first if first is not None else {k: v.item() for k, v in parts.items()}
    assert parts["caption"].item() < 0.8 * first["caption"]
    assert parts["recon"].item() < first["recon"]


def test_bad_shapes_are_task_errors():
    with pytest.raises(TaskError, match="patch_channels"):
        _task(model={"patch_channels": 3})
    with pytest.raises(TaskError, match="patch_time"):
        _task(model={"patch_time": 70})
    with pytest.raises(TaskError, match="at most 34"):
        _task(data={"channels": 40})


def test_preset_parameter_counts():
    from engine.tasks.sensorlm.presets_info import param_counts

    counts = param_counts()
    assert set(counts) == {"demo", "tiny", "small", "base"}
    assert 9e6 < counts["tiny"] < 13e6
    assert 38e6 < counts["small"] < 50e6
    assert counts["base"] > 85e6
    base = load(preset="base").task_config
    assert (base.model.dim, base.model.depth, base.model.heads) == (768, 12, 12)
    assert (base.data.minutes // base.model.patch_time) * (base.data.channels // base.model.patch_channels) == 2448
