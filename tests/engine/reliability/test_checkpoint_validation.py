"""Checkpoints forged with a recomputed checksum but absurd metadata or shapes: skipped, never rotated.

Before: such a ``last`` passed verification, crashed the first step with a
traceback, and the crash checkpoint rotated it over the good ``last.prev``,
so every later resume crashed too. Now each is validated like the config
(types, ranges, shapes against the model and optimizer) and skipped with a
warning for ``last.prev``; the resumed run's saves replace the bad ``last``
without rotating it, so ``last.prev`` keeps the good state.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from engine.checkpoint import format as ckpt
from engine.checkpoint import store
from tests.conftest import read_events
from tests.engine.reliability.harness import TOY

FLAGS = [*TOY, "--eval-every", "0", "--checkpoint-every", "3", "--set", "checkpoint.save_best=false"]


def _forge(path: Path, meta_edit=None, tensor_edit=None) -> None:
    """Rewrite a checkpoint's metadata/tensors and recompute every checksum (a careful forger)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        header = dict(handle.metadata())
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    meta = json.loads(header["meta"])
    if meta_edit:
        meta_edit(meta)
    if tensor_edit:
        tensor_edit(tensors)
    assert set(header) == {"format", "meta", "meta_sha256", "manifest"}, header  # all the writer writes
    ckpt.write(path, tensors, meta)  # the format's own writer: every checksum recomputed
    ckpt.read(path)  # the checksums verify: only validation can catch it


def _wider(tensors: dict) -> None:
    name = next(k for k in tensors if k.startswith("model.") and tensors[k].ndim == 2)
    tensors[name] = torch.zeros(tensors[name].shape[0] + 1, tensors[name].shape[1])


def _optimizer_state_shape(tensors: dict) -> None:
    name = next(k for k in tensors if k.startswith("optim.") and k.endswith("exp_avg"))
    tensors[name] = torch.zeros(3)


FORGERIES = {
    "position beyond the epoch": dict(meta_edit=lambda m: m.update(position=10**9)),
    "step -1": dict(meta_edit=lambda m: m.update(step=-1)),
    "a string where an int belongs": dict(meta_edit=lambda m: m.update(batch_size="16")),
    "grad_accum above batch_size": dict(meta_edit=lambda m: m.update(grad_accum=10**6)),
    "a float where a bool belongs": dict(meta_edit=lambda m: m["abort"].update(higher_is_better=0.5)),
    "a model tensor of the wrong shape": dict(tensor_edit=_wider),
    "an optimizer tensor of the wrong shape": dict(tensor_edit=_optimizer_state_shape),
}


@pytest.fixture(scope="module")
def trained(engines, tmp_path_factory) -> Path:
    """A run stopped at step 6: ``last`` at 6, ``last.prev`` at 3."""
    where = tmp_path_factory.mktemp("trained")
    engine = engines.spawn([*FLAGS, "--max-steps", "6", "--run-dir", str(where / "run")], where)
    assert engine.wait(120) == 0, engine.stderr()
    return where / "run"


@pytest.mark.parametrize("case", sorted(FORGERIES))
def test_a_forged_last_is_skipped_for_last_prev_and_never_rotated_over_it(engines, trained: Path, tmp_path: Path,
                                                                          case: str) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    checkpoints = run / "checkpoints"
    _forge(checkpoints / "last.safetensors", **FORGERIES[case])
    good_prev = (checkpoints / "last.prev.safetensors").read_bytes()
    assert ckpt.read(checkpoints / "last.prev.safetensors").meta["step"] == 3

    resumed = engines.spawn(["--resume", str(run), "--max-steps", "4"], tmp_path)
    assert resumed.wait(120) == 0, resumed.stderr()
    assert "Traceback" not in resumed.stderr()
    events = read_events(run)
    started = [e for e in events if e["type"] == "run_started"][-1]
    assert started["start_step"] == 3 and started["resumed_from"].endswith("last.prev.safetensors")
    warnings = [e["text"] for e in events if e["type"] == "warning" and e["t"] >= started["t"]]
    # a file whose model is merely shaped otherwise is intact (a flag can do that): not called damaged
    said = "skipped checkpoint: " if case == "a model tensor of the wrong shape" else "skipped damaged checkpoint: "
    assert any(said in w and "last.safetensors" in w for w in warnings), warnings
    # The run's final save (step 4) replaced the forged `last`; the good `last.prev` is untouched.
    assert (checkpoints / "last.prev.safetensors").read_bytes() == good_prev
    assert store.load_latest(checkpoints).meta["step"] == 4
