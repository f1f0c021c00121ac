"""What an lm run writes: LoRA checkpoints without the frozen base (but with its identity), tokens/s and MFU in
the step events, the task's export at the end of a run and with a checkpoint asked for now.

In-process Trainers on the `tiny` preset (seconds each once transformers is imported).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.engine.lm.conftest import make_config

TWO_STEPS = {"train": {"max_steps": 2}, "evaluation": {"every": 0}}


def _train(config, directory: Path, controls=None):
    from engine.run.sinks import EventBus
    from engine.training.loop import Trainer

    seen = []
    trainer = Trainer(config, EventBus([seen.append]), controls, checkpoint_dir=directory)
    trainer.run()
    return trainer, seen


def _resume(config, directory: Path):
    from engine.checkpoint import format as ckpt
    from engine.run.sinks import EventBus
    from engine.training.loop import Trainer

    trainer = Trainer(config, EventBus(), checkpoint_dir=directory, resume=ckpt.read(directory / "last.safetensors"))
    trainer.setup()
    return trainer


def test_lora_checkpoint_holds_what_trains_and_resumes_only_onto_the_same_base(corpus_file, tmp_path) -> None:
    from engine.checkpoint import format as ckpt

    config = make_config(corpus_file, **TWO_STEPS)
    trained, _ = _train(config, tmp_path / "ck")
    loaded = ckpt.read(tmp_path / "ck" / "last.safetensors")
    kept = {k[len("model."):] for k in loaded.tensors if k.startswith("model.")}
    assert kept == {n for n, p in trained.model.named_parameters() if p.requires_grad}
    assert kept and all("lora_" in k for k in kept)
    assert loaded.meta["frozen"]["source"].startswith("random Llama") and loaded.meta["frozen"]["tensors"] > 0

    again = _resume(config, tmp_path / "ck")  # the base is rebuilt, the adapters loaded onto it
    assert again.step == 2
    for (name, a), b in zip(trained.model.state_dict().items(), again.model.state_dict().values()):
        assert torch.equal(a, b), name

    other_seed = make_config(corpus_file, **{**TWO_STEPS, "train": {"max_steps": 2, "seed": 1}})  # another random base
    with pytest.raises(ckpt.CheckpointMismatch, match="trained on base model .* seed 0.*this run builds"):
        _resume(other_seed, tmp_path / "ck")


def test_a_changed_base_directory_is_refused_by_its_fingerprint(corpus_file, tmp_path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from engine.checkpoint import format as ckpt

    base = LlamaForCausalLM(LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2))
    base.save_pretrained(tmp_path / "base")
    config = make_config(corpus_file, **TWO_STEPS, tokenizer="byte", model={"path": str(tmp_path / "base")})
    _train(config, tmp_path / "ck")
    _resume(config, tmp_path / "ck")  # the same directory: fine
    with torch.no_grad():
        base.model.norm.weight.mul_(1.5)  # a "fine-tuned" base saved over the old one, same shapes
        base.lm_head.weight.add_(0.01)
    base.save_pretrained(tmp_path / "base")
    with pytest.raises(ckpt.CheckpointMismatch, match="frozen base weights differ"):
        _resume(config, tmp_path / "ck")


def test_full_fine_tune_saves_every_tensor(corpus_file, tmp_path) -> None:
    from engine.checkpoint import format as ckpt

    trained, _ = _train(make_config(corpus_file, **TWO_STEPS, finetune="full"), tmp_path / "ck")
    loaded = ckpt.read(tmp_path / "ck" / "last.safetensors")
    assert {k[len("model."):] for k in loaded.tensors if k.startswith("model.")} == set(trained.model.state_dict())
    assert "frozen" not in loaded.meta


def test_steps_carry_tokens_per_s_and_mfu_and_exports_are_written(corpus_file, tmp_path) -> None:
    from engine.run import events as ev
    from engine.run.control import requests as control

    controls = control.Controls()
    controls.submit(control.checkpoint_now())  # answered at the first boundary: step 0
    config = make_config(corpus_file, **{**TWO_STEPS, "train": {"max_steps": 2, "log_every": 1}})
    _, seen = _train(config, tmp_path / "run" / "checkpoints", controls)
    steps = [e for e in seen if isinstance(e, ev.StepLogged)]
    assert steps and all(s.tokens_per_s == pytest.approx(s.samples_per_s * 32, rel=1e-9) for s in steps)
    assert all(s.mfu == 0.0 for s in steps)  # CPU: no peak, shown "–"
    exports = [e for e in seen if isinstance(e, ev.ExportWritten)]
    assert [(e.kind, e.step) for e in exports] == [("manual", 0), ("final", 2)]
    final = tmp_path / "run" / "exports" / "step-2"
    assert exports[-1].path == str(final) and (final / "adapter_model.safetensors").is_file()
    assert seen[-1].export == str(final)


def test_mfu_against_the_peak_table() -> None:
    from engine.core.fmt import format_mfu
    from engine.training.throughput import Throughput, peak_flops

    class Task:
        def tokens_per_sample(self) -> int:
            return 1000

        def flops_per_token(self, model) -> float:
            return 1e9

    assert peak_flops("CPU (2 threads)") is None and peak_flops("NVIDIA H100 PCIe") == 756e12
    assert peak_flops("NVIDIA H100 80GB HBM3") == peak_flops("NVIDIA H200") == 989e12
    rates = Throughput(Task(), None, "NVIDIA A100-SXM4-80GB", world=2).rates(samples=312, seconds=2.0)
    assert rates["tokens_per_s"] == 156_000 and rates["mfu"] == pytest.approx(156_000 * 1e9 / (2 * 312e12))
    assert format_mfu(rates["mfu"]) == "25.0 %"
    assert Throughput(Task(), None, "CPU (2 threads)").rates(10, 1.0)["mfu"] == 0.0 and format_mfu(0.0) == "–"
