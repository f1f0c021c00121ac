"""The LM's model side: LoRA through peft, PEFT export round-trips, LoRA+ groups, checkpointing, seeding, bad model
input.

One LoRA model is trained once per module (transformers' import and the
model build cost seconds on 2 cores) and every round-trip test reads it.
"""

from __future__ import annotations

import json

import pytest
import torch

from engine.tasks.lm import model as lmmodel
from engine.tasks.lm.task import LMTask
from engine.tasks.protocol import TaskError
from tests.engine.lm.conftest import make_config

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _train(task: LMTask, model, steps: int = 4):
    """A few AdamW steps over the task's own param groups (lr × lr_mult per group)."""
    lr = task.config.optimizer.lr
    groups = task.param_groups(model)
    opt = torch.optim.AdamW([{**g, "lr": lr * g["lr_mult"]} for g in groups], lr=lr)
    for step in range(steps):
        batch = task.make_batch(list(range(4 * step, 4 * step + 4)), step, True)
        loss, _ = task.loss(model, batch, step)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return model


def _setup(config) -> LMTask:
    task = LMTask(config)
    task.setup()
    return task


@pytest.fixture(scope="module")
def trained(corpus_file, tmp_path_factory):
    """A LoRA (all-linear, norms trained) model after 4 steps, its task, and its exported adapter."""
    task = _setup(make_config(corpus_file, lora={"train_norms": True}))
    model = _train(task, task.build_model())
    out = task.export(model, tmp_path_factory.mktemp("export") / "adapter")
    return task, model.eval(), out


def _logits(model, task) -> torch.Tensor:
    tokens = task.make_batch(task.val_indices()[:3], 0, False)["tokens"]
    with torch.no_grad():
        return model(input_ids=tokens[:, :-1]).logits


def test_exported_adapter_reloads_onto_the_same_base_exactly(trained, tmp_path) -> None:
    """As docs/LM.md says: the base rebuilt from the run's config.toml (sensorlm_tui.lm), the adapter onto it."""
    from peft import PeftModel

    from engine.core import config as cfg
    from sensorlm_tui.lm import base_model

    task, model, out = trained
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 4 and config["lora_alpha"] == 8.0
    assert sorted(config["target_modules"]) == sorted(TARGETS) and config["task_type"] == "CAUSAL_LM"
    assert (out / "adapter_model.safetensors").is_file()
    (tmp_path / "config.toml").write_text(cfg.dump_toml(task.config))
    reloaded = PeftModel.from_pretrained(base_model(tmp_path), str(out)).eval()
    delta = (_logits(reloaded, task) - _logits(model, task)).abs().max().item()
    # The trained adapters moved the logits (so a default-init load would fail this) and reload to < 1e-5.
    assert delta < 1e-5
    with reloaded.disable_adapter():
        assert (_logits(reloaded, task) - _logits(model, task)).abs().max().item() > 1e-3


def test_full_finetune_exports_a_pretrained_directory(corpus_file, tmp_path) -> None:
    from transformers import AutoModelForCausalLM

    task = _setup(make_config(corpus_file, finetune="full"))
    model = _train(task, task.build_model(), steps=2).eval()
    out = task.export(model, tmp_path / "model")
    again = AutoModelForCausalLM.from_pretrained(str(out), local_files_only=True).eval()
    assert (_logits(again, task) - _logits(model, task)).abs().max().item() < 1e-5
    with pytest.raises(TaskError, match="trains the full model"):
        task.export(model, tmp_path / "adapter", "peft_adapter")
    assert not (tmp_path / "adapter").exists()


def test_loraplus_puts_lora_b_at_lr_times_ratio(corpus_file) -> None:
    task = _setup(make_config(corpus_file, lora={"plus_ratio": 16.0}))
    model = task.build_model()
    scale = {id(p): g["lr_mult"] for g in task.param_groups(model) for p in g["params"]}
    named = dict(model.named_parameters())
    lora_b = [n for n in named if "lora_B" in n]
    lora_a = [n for n in named if "lora_A" in n]
    assert len(lora_b) == len(lora_a) == 2 * len(TARGETS)
    assert all(scale[id(named[n])] == 16.0 for n in lora_b)
    assert all(scale[id(named[n])] == 1.0 for n in lora_a)
    # Only what trains is in a group: the frozen base has no optimizer state.
    assert set(scale) == {id(p) for p in model.parameters() if p.requires_grad}


def test_activation_checkpointing_keeps_every_target_in_the_adapter(corpus_file, tmp_path) -> None:
    from safetensors import safe_open

    task = _setup(make_config(corpus_file, model={"activation_checkpointing": True}))
    model = task.build_model()
    assert model.get_base_model().is_activation_checkpointing
    loss, _ = task.loss(model, task.make_batch([0, 1], 0, True), 0)
    loss.backward()
    lora = [p for n, p in model.named_parameters() if "lora_" in n]
    assert lora and all(p.grad is not None for p in lora if p.requires_grad)
    out = task.export(model, tmp_path / "adapter")
    with safe_open(str(out / "adapter_model.safetensors"), "pt") as handle:
        keys = set(handle.keys())
    layers = task.lm.model.layers
    expected = {f"base_model.model.model.layers.{i}.{block}.{t}.lora_{ab}.weight"
                for i in range(layers) for t in TARGETS
                for block in ["self_attn" if t in TARGETS[:4] else "mlp"] for ab in "AB"}
    assert expected <= keys


def test_weight_init_seed_is_honoured_on_every_path(corpus_file) -> None:
    config = make_config(corpus_file)
    task = _setup(config)
    torch.manual_seed(123)
    first = {k: v.clone() for k, v in task.build_model().state_dict().items()}
    torch.manual_seed(999)  # a different global state before the build changes nothing
    second = task.build_model().state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)
    other = LMTask(make_config(corpus_file, train={"seed": 1}))
    other.setup()
    third = other.build_model().state_dict()
    lora_a = [k for k in first if "lora_A" in k]
    assert lora_a and not any(torch.equal(first[k], third[k]) for k in lora_a)


def test_bad_model_input_is_one_line_naming_the_field(corpus_file, tmp_path) -> None:
    with pytest.raises(TaskError, match="lm.lora.targets: qkv not in this model"):
        _setup(make_config(corpus_file, lora={"targets": ["q_proj", "qkv"]})).build_model()
    with pytest.raises(TaskError, match=r"lm.model.path=.*: no such directory"):
        _setup(make_config(corpus_file, model={"path": str(tmp_path / "missing")}))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    with pytest.raises(TaskError, match="config.json is not valid JSON"):
        _setup(make_config(corpus_file, model={"path": str(broken)}))
    # A real model directory whose weights are damaged: one line, and the directory is left as it was.
    good = tmp_path / "llama"
    base = lmmodel.base_model(make_config(corpus_file).task_config, 32)
    base.save_pretrained(str(good))
    weights = good / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    before = {p.name: p.read_bytes() for p in good.iterdir()}
    with pytest.raises(TaskError) as err:
        _setup(make_config(corpus_file, tokenizer="byte", model={"path": str(good)})).build_model()
    assert str(err.value).startswith(f"lm.model.path={good}: ") and "\n" not in str(err.value)
    assert {p.name: p.read_bytes() for p in good.iterdir()} == before
