"""The lm task through the engine: LoRA+ learning rates, an applied clip, exact resume after SIGKILL, export.

Each engine process imports transformers (seconds on 2 cores), so one killed
and resumed run is compared with one uninterrupted run, and the export
command reads the latter.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.conftest import kill_at_checkpoint_and_resume, read_events, run_forked
from tests.engine.lm.conftest import make_config

STEPS = 6


def _flags(corpus: Path) -> list[str]:
    return ["train", "--task", "lm", "--preset", "tiny", "--threads", "1", "--headless", "--data", str(corpus),
            "--max-steps", str(STEPS), "--eval-every", "3", "--checkpoint-every", "3",
            "--set", "lm.lora.plus_ratio=16", "--set", "lm.lora.train_norms=true"]


@pytest.fixture(scope="module")
def whole(forks, corpus_file, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("lm") / "whole"
    result = run_forked(forks, *_flags(corpus_file), "--run-dir", str(run), timeout=300)
    assert result.returncode == 0, result.stderr
    return run


def _steps(events: list[dict]) -> dict[int, float]:
    return {e["step"]: e["loss"] for e in events if e["type"] == "step"}


@pytest.mark.slow
def test_run_reports_perplexity(whole) -> None:
    events = read_events(whole)
    started = next(e for e in events if e["type"] == "run_started")
    assert started["capabilities"]["primary"]["name"] == "perplexity"
    evals = [e for e in events if e["type"] == "eval"]
    assert [e["step"] for e in evals] == [0, 3, 6]
    for e in evals:
        assert e["metrics"]["perplexity"] == pytest.approx(2.718281828 ** e["metrics"]["val_loss"], rel=1e-9)
    # The run's end exports the adapter (atomically, beside the checkpoints) and its last line says where.
    final = whole / "exports" / f"step-{STEPS}"
    assert events[-1]["type"] == "run_finished" and events[-1]["export"] == str(final)
    assert (final / "adapter_model.safetensors").is_file() and (final / "adapter_config.json").is_file()


@pytest.mark.slow
def test_resume_after_sigkill_gives_the_same_losses_and_optimizer_digest(forks, whole, corpus_file,
                                                                         tmp_path) -> None:
    run = tmp_path / "killed"
    kill_at_checkpoint_and_resume(_flags(corpus_file), run, 3, timeout=300, forks=forks)
    events, reference = read_events(run), read_events(whole)
    restarted = [x for x in events if x["type"] == "run_started"][-1]["t"]
    after = {e["step"]: e["loss"] for e in events if e["type"] == "step" and e["t"] > restarted}
    assert after == {s: _steps(reference)[s] for s in range(4, STEPS + 1)}
    digests = [[e["digest"] for e in ev if e["type"] == "checkpoint" and e["step"] == STEPS]
               for ev in (events, reference)]
    assert digests[0] and digests[0][-1] == digests[1][-1]
    # The engine itself recomputed the digest of the optimizer it loaded and found the checkpoint's.
    assert any(e["type"] == "log" and e["text"].startswith("resume: optimizer state sha256 ")
               and e["text"].endswith(f"matches {run / 'checkpoints' / 'last.safetensors'}") for e in events)


@pytest.mark.slow
def test_export_command_writes_from_any_checkpoint(forks, whole, tmp_path) -> None:
    from safetensors.torch import load_file

    result = run_forked(forks, "export", str(whole), "--checkpoint", str(whole / "checkpoints" / "last.safetensors"),
                        "--out", str(tmp_path / "adapter"), timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(tmp_path / "adapter")
    # From the adapters-only checkpoint onto the rebuilt base: the same adapter the run exported from memory.
    rebuilt = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    live = load_file(whole / "exports" / f"step-{STEPS}" / "adapter_model.safetensors")
    assert rebuilt.keys() == live.keys() and all(torch.equal(rebuilt[k], live[k]) for k in live)
    bad = run_forked(forks, "export", str(whole), "--kind", "onnx", timeout=300)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "--kind 'onnx'; task 'lm' exports: peft_adapter, pretrained" in bad.stderr
    assert not (whole / "exports" / "onnx-step-6").exists()


def test_loraplus_lr_and_applied_clip_in_the_engine(corpus_file) -> None:
    from engine.run.sinks import EventBus
    from engine.training.loop import Trainer

    config = make_config(corpus_file, train={"max_steps": 2}, evaluation={"every": 0},
                         optimizer={"clip_grad_norm": 1e-3, "lr": 1e-2},
                         schedule={"kind": "constant", "warmup_frac": 0.0},
                         lora={"plus_ratio": 16.0})
    seen = []
    bus = EventBus([seen.append])
    trainer = Trainer(config, bus)
    trainer.run()
    model = trainer.model
    lrs = {id(p): g["lr"] for g in trainer.optim.optimizer.param_groups for p in g["params"]}
    named = dict(model.named_parameters())
    assert all(lrs[id(named[n])] == pytest.approx(0.16) for n in named if "lora_B" in n)
    assert all(lrs[id(named[n])] == pytest.approx(0.01) for n in named if "lora_A" in n)
    # The last step's gradients are still there, clipped: their norm is the clip, the logged pre-clip norm above it.
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item()
    logged = [e.grad_norm for e in seen if type(e).__name__ == "StepLogged"][-1]
    assert logged > 10 * 1e-3 and norm == pytest.approx(1e-3, rel=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("flags, expected", [
    (["--data", "BINARY"], "data.path: {tmp}/bin.dat: binary file"),
    (["--set", 'lm.lora.targets=["qkv"]'], "lm.lora.targets: qkv not in this model"),
    (["--set", "lm.lora.r=0"], "--set lm.lora.r=0: Input should be greater than or equal to 1"),
])
def test_bad_input_is_one_line_exit_2_and_no_run_directory(forks, corpus_file, tmp_path, flags, expected) -> None:
    (tmp_path / "bin.dat").write_bytes(b"\x7fELF\x00\x01" * 500)
    flags = [str(tmp_path / "bin.dat") if f == "BINARY" else f for f in flags]
    run = tmp_path / "run"
    result = run_forked(forks, "train", "--task", "lm", "--preset", "tiny", "--headless", "--data", str(corpus_file),
                        *flags, "--run-dir", str(run), timeout=300)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and expected.format(tmp=tmp_path) in result.stderr
    assert not run.exists()
