"""FSDP2 under torchrun on 2 CPU processes (gloo): losses as one process, DCP checkpoints, resume on any world.

One file-scoped story keeps the torchrun jobs to three (each ~10-20 s on 2 cores: two interpreters
importing torch). Every run gets the same NaN at step 6 with nan_patience 1, so each one also rolls back
to its step-4 checkpoint at LR x0.5: the ranks must roll back together (DCP's collective load) for the
losses to keep matching one process.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import output, read_events, run_cli

#: The toy task without dropout, a checkpoint every 4 steps, a rollback at the first non-finite step.
TOY = ("--task", "toy", "--batch-size", "8", "--grad-accum", "2", "--set", "toy.dropout=0", "--eval-every", "4",
       "--checkpoint-every", "4", "--set", "train.log_every=1", "--set", "schedule.kind='constant'",
       "--set", "policies.nan_patience=1")


def _losses(run_dir: Path, since: int = 0) -> dict[int, float]:
    """Step → loss of the last time each step was logged, from the ``since``-th run_started on."""
    events = read_events(run_dir)
    starts = [i for i, e in enumerate(events) if e.get("type") == "run_started"]
    return {e["step"]: e["loss"] for e in events[starts[since]:] if e.get("type") == "step" and not e["skipped"]}


def _close(a: dict, b: dict, steps, rel: float = 1e-5) -> None:
    for step in steps:
        assert abs(a[step] - b[step]) <= rel * abs(a[step]), (step, a[step], b[step])


@pytest.fixture
def nan_at_6(monkeypatch):
    monkeypatch.setenv("SENSORLM_TUI_FAULTS", "nan@6")


@pytest.mark.slow
def test_fsdp2_matches_one_process_and_its_dcp_checkpoints_resume_on_any_world_size(tmp_path, nan_at_6):
    one = run_cli(*TOY, "--max-steps", "20", "--run-dir", str(tmp_path / "one"), module="engine")
    assert one.returncode == 0, one.stderr[-2000:]
    a = _losses(tmp_path / "one")
    two = tmp_path / "two"
    # Compiled block by block (aot_eager: the wiring, FSDP2's hooks eager around each compiled block): the
    # losses check compile under FSDP2 against the eager process too.
    job = run_cli(*TOY, "--max-steps", "12", "--run-dir", str(two), "--nproc-per-node", "2", "--strategy", "fsdp2",
                  "--compile", "blocks", "--set", "runtime.compile_backend='aot_eager'", module="engine", timeout=180)
    assert job.returncode == 0, output(job)
    b = _losses(two)
    assert sorted(b) == list(range(1, 13))
    _close(a, b, range(1, 13))  # not bit-identical: the gradients are reduce-scattered over two halves
    assert [e["mode"] for e in read_events(two) if e.get("type") == "compile"][:1] == ["blocks"]
    rolled = [e for e in read_events(two) if e.get("type") == "setting" and "rolled back" in (e.get("reason") or "")]
    assert len(rolled) == 1 and "rolled back to step 4" in rolled[0]["reason"]

    # DCP layout: committed step directories with both ranks' shards and rank 0's sidecar; links to them.
    ckpts = two / "checkpoints"
    dirs = sorted(p.name for p in ckpts.iterdir() if p.name.startswith("step-"))
    # Pruned to the newest two (keep_last 0) and whatever `best` names; no single-file checkpoints.
    assert set(dirs) == {"step-00000008", "step-00000012", os.readlink(ckpts / "best")}
    assert not list(ckpts.glob("*.safetensors"))
    assert {p.name for p in (ckpts / "step-00000012").iterdir()} >= {".metadata", "__0_0.distcp", "__1_0.distcp",
                                                                     "engine.safetensors"}
    assert os.readlink(ckpts / "last") == "step-00000012" and (ckpts / os.readlink(ckpts / "best")).is_dir()

    # Cut off before its .metadata (what a kill mid-save leaves): skipped for the previous complete directory,
    # and the same 2 ranks continue from it exactly (CPU: bit-identical to the uninterrupted run).
    cut = tmp_path / "cut"
    shutil.copytree(two, cut, symlinks=True)
    os.replace(cut / "checkpoints" / "step-00000012" / ".metadata",
               cut / "checkpoints" / "step-00000012" / ".metadata.tmp")
    job = run_cli("--resume", str(cut), "--max-steps", "12", "--nproc-per-node", "2", module="engine", timeout=180)
    assert job.returncode == 0, output(job)
    started = [e for e in read_events(cut) if e.get("type") == "run_started"][-1]
    assert started["start_step"] == 8 and started["resumed_from"].endswith("step-00000008")
    c = _losses(cut, since=1)
    assert sorted(c) == [9, 10, 11, 12] and all(c[s] == b[s] for s in c), (c, b)
    redone = cut / "checkpoints" / "step-00000012"  # the cut-off directory was cleared and written again
    assert (redone / ".metadata").is_file() and not (redone / ".metadata.tmp").exists()

    # 2 → 1: the 2-rank checkpoint resharded into one process (fsdp2 in a process group of one).
    job = run_cli("--resume", str(two), "--max-steps", "16", module="engine")
    assert job.returncode == 0, job.stderr[-2000:]
    _close(a, _losses(two, since=1), range(13, 17))
    # 1 → 2: that process's checkpoint resharded over two ranks again.
    job = run_cli("--resume", str(two), "--max-steps", "20", "--nproc-per-node", "2", module="engine", timeout=180)
    assert job.returncode == 0, output(job)
    _close(a, _losses(two, since=2), range(17, 21))

    # A run keeps its strategy: resuming it as ddp is one line and exit 2, nothing written.
    before = (two / "events.jsonl").read_bytes()
    refused = run_cli("--resume", str(two), "--strategy", "ddp", "--max-steps", "24", module="engine")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "was trained with fsdp2" in refused.stderr and "--strategy fsdp2" in refused.stderr
    assert (two / "events.jsonl").read_bytes() == before

    # Export's path: the last DCP directory gathered into a plain module in this process (no process group)
    # holds the weights the one-process run has in its single file, up to the float differences above.
    _check_full_weights(ckpts / "last", tmp_path / "one" / "checkpoints", tmp_path)


def _check_full_weights(sharded: Path, plain_dir: Path, tmp_path: Path) -> None:
    import pickle

    import torch

    from engine.checkpoint import dcp, store
    from engine.checkpoint import format as ckpt
    from engine.core.config import validate
    from engine.core.registry import make_task

    loaded, plain = store.read(sharded), store.load_latest(plain_dir)
    assert loaded.meta["step"] == plain.meta["step"] == 20 and loaded.meta["world"] == 2
    build = make_task(validate(loaded.meta["config"], "test")).build_model
    model = build()
    dcp.load_full(sharded, model)
    for name, value in model.state_dict().items():
        # AdamW turns the ~1e-7 gradient differences of near-zero entries into up to ~1e-5 absolute after 20
        # steps (measured 1.0e-5 on weights of mean size 0.04); a misplaced or missing shard is off by ~0.04.
        assert torch.allclose(value, plain.tensors[f"model.{name}"], rtol=1e-3, atol=5e-5), name

    # DCP's .metadata is a pickle: one that would run code is refused, never executed.
    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    bad = tmp_path / "bad"
    shutil.copytree(sharded, bad)
    (bad / ".metadata").write_bytes(pickle.dumps(Evil()))
    with pytest.raises(ckpt.CheckpointError, match="not a plain checkpoint record"):
        dcp.load_full(bad, build())
    assert not (tmp_path / "pwned").exists()


def test_scalar_parameters_shard_as_vectors_and_export_as_scalars(tmp_path):
    """FSDP2 cannot shard a 0-dim parameter (a CLIP-style logit scale): it trains as a (1,) vector, and the
    export path turns it back into the model's own scalar."""
    import torch
    import torch.distributed.checkpoint as torch_dcp
    from torch import nn

    from engine.checkpoint import dcp
    from engine.distributed.fsdp import vectorize_scalars

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.tensor(2.5))
            self.head = nn.Linear(3, 2)
            self.head.temperature = nn.Parameter(torch.tensor(-1.0))

    trained = Model()
    assert vectorize_scalars(trained) == ["scale", "head.temperature"]
    assert trained.scale.shape == (1,) and trained.head.temperature.shape == (1,)
    torch_dcp.save({"model": trained.state_dict()}, checkpoint_id=str(tmp_path), no_dist=True)
    fresh = Model()
    with torch.no_grad():
        fresh.scale.zero_()
        fresh.head.weight.zero_()
    dcp.load_full(tmp_path, fresh)
    assert fresh.scale.shape == () and float(fresh.scale) == 2.5 and float(fresh.head.temperature) == -1.0
    assert torch.equal(fresh.head.weight, trained.head.weight)
