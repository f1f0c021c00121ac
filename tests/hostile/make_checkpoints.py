"""Regenerate tests/hostile/checkpoint/: damaged and foreign checkpoints of a tiny toy run.

Run ``python tests/hostile/make_checkpoints.py`` after a change to the
checkpoint format (engine.checkpoint.format.FORMAT_VERSION or the metadata fields);
``test_hostile.py::test_corpus_control_checkpoint_still_resumes`` fails and
says so when the committed files are stale. Each file is ~20 KB: the model is
a one-layer, 8-wide MLP on one 60-minute channel.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent / "checkpoint"
ROOT = HERE.parents[2]
TINY = ["--task", "toy", "--threads", "1", "--max-steps", "3", "--eval-every", "0", "--batch-size", "4",
        "--set", "toy.depth=1", "--set", "toy.channels=1", "--set", "toy.length=60",
        "--set", "toy.val_samples=4", "--set", "checkpoint.save_best=false"]


def _train(run: Path, *extra: str) -> Path:
    subprocess.run([sys.executable, "-m", "engine", *TINY, *extra, "--run-dir", str(run)], cwd=ROOT, check=True,
                   capture_output=True)
    return run / "checkpoints" / "last.safetensors"


def _with_meta(source: Path, target: Path, edit, rehash: bool) -> None:
    """Rewrite the metadata JSON text with ``edit(text)``; ``rehash`` recomputes its checksum (a careful forger)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(source), framework="pt") as handle:
        header = dict(handle.metadata())
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    header["meta"] = edit(header["meta"])
    if rehash:
        header["meta_sha256"] = hashlib.sha256(header["meta"].encode()).hexdigest()
    save_file(tensors, str(target), metadata=header)


def main() -> None:
    """Write every case file into tests/hostile/checkpoint/."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    HERE.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        good = _train(Path(tmp) / "good", "--set", "toy.dim=8")
        shutil.copy(Path(tmp) / "good" / "config.toml", HERE / "config.toml")
        shutil.copy(good, HERE / "valid.safetensors")
        shutil.copy(_train(Path(tmp) / "wide", "--set", "toy.dim=16"), HERE / "other_shape.safetensors")
        data = good.read_bytes()
        (HERE / "empty.safetensors").write_bytes(b"")
        (HERE / "truncated.safetensors").write_bytes(data[: len(data) // 2])
        flipped = bytearray(data)
        for i in range(len(data) - 64, len(data) - 32):  # inside the last tensor's bytes, past the header
            flipped[i] ^= 0xFF
        (HERE / "flipped_bytes.safetensors").write_bytes(bytes(flipped))
        (HERE / "huge_header.safetensors").write_bytes((1 << 60).to_bytes(8, "little") + b"{" + b" " * 64)
        _with_meta(good, HERE / "edited_meta.safetensors", lambda t: t.replace('"step":3', '"step":300'), False)
        _with_meta(good, HERE / "edited_meta_rehashed.safetensors", lambda t: t.replace('"step":3', '"step":"ten"'),
                   True)
        _with_meta(good, HERE / "meta_not_object.safetensors", lambda t: json.dumps([1, 2, 3]), True)
        _with_meta(good, HERE / "meta_not_json.safetensors", lambda t: t[: len(t) // 2], True)
        with safe_open(str(good), framework="pt") as handle:
            header = dict(handle.metadata())
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}
        save_file(tensors, str(HERE / "foreign.safetensors"))  # a real safetensors file, not one of ours
        fewer = dict(tensors)
        fewer.pop(sorted(k for k in fewer if k.startswith("model."))[0])
        save_file(fewer, str(HERE / "tensor_missing.safetensors"), metadata=header)
        with open(HERE / "pickle.safetensors", "wb") as handle:  # what torch.save writes: a zip of pickles
            torch.save({"model": {"w": torch.zeros(2)}, "step": 3}, handle)
        (HERE / "plain_pickle.safetensors").write_bytes(pickle.dumps({"step": 3}))


if __name__ == "__main__":
    main()
