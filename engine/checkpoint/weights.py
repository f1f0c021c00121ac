"""What a checkpoint keeps of the model: the weights that train, and the identity of those that do not.

A model whose parameters all train (a full fine-tune, every built-in task but
a LoRA run) saves every tensor of its ``state_dict``, as before. A model with
frozen parameters (LoRA: the whole base) saves only what trains, plus its
buffers, and under ``frozen`` in the metadata the base's identity:

- ``source``: where the task builds the frozen weights from
  (``Task.model_source()``: a model directory, or a random init's shape and
  seed);
- ``fingerprint``: sha256 over every frozen tensor's name, dtype and shape
  and up to 4,096 of its elements, evenly strided.

A resume (and ``export``) rebuilds the base the same way and must find the
same identity, or it is refused (``CheckpointMismatch``): adapters trained on
one base are silently wrong on another. The fingerprint tells bases apart
(another checkpoint or init differs nearly everywhere); it is no integrity
check of single weights, which the checkpoint does not hold anyway. The
strided values are exact, so a base rebuilt on another device matches. It
reads ~4 k elements a tensor, once per process (frozen weights do not change).

For the tiny Llama LoRA of the tests (the ``tiny`` preset) this cuts a
checkpoint from 234 kB to 89 kB; at the ``base`` preset's seed-001 scale
(0.47 B frozen, 9.0 M adapter parameters, fp32) from ~2.0 GB to ~0.11 GB.
"""

from __future__ import annotations

import hashlib
import json

import torch
from torch import nn

from engine.checkpoint import format as ckpt

#: Elements of each frozen tensor the fingerprint reads (evenly strided).
SAMPLES = 4096


def fingerprint(named: list[tuple[str, torch.Tensor]]) -> str:
    """sha256 over (name, dtype, shape, ≤ SAMPLES strided elements) of each tensor, in name order."""
    h = hashlib.sha256()
    for name, tensor in sorted(named, key=lambda item: item[0]):
        flat = tensor.detach().reshape(-1)
        sample = flat[:: max(1, flat.numel() // SAMPLES)][:SAMPLES].cpu().contiguous()
        h.update(json.dumps([name, str(tensor.dtype), list(tensor.shape)]).encode())
        h.update(sample.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class Weights:
    """The model's part of a checkpoint (module docstring): trainable tensors, buffers, the frozen base's identity."""

    def __init__(self, model: nn.Module, source: str | None = None) -> None:
        """``source`` names where the frozen weights come from (``Task.model_source()``)."""
        self.model = model
        self.source = source
        # FSDP2 shards parameters into DTensors and DCP saves every shard itself (engine.checkpoint.dcp): nothing
        # is left out there, and a fingerprint of shards would depend on the world size.
        sharded = any(hasattr(p, "to_local") for p in model.parameters())
        #: state_dict names of the parameters that do not train (tied weights under each of their names).
        self.frozen = set() if sharded else {name for name, p in model.named_parameters(remove_duplicate=False)
                                             if not p.requires_grad}
        self._fingerprint: str | None = None

    @classmethod
    def of(cls, trainer) -> "Weights":
        """For a Trainer after it built its task and model (engine.training.loop)."""
        return cls(trainer.model, trainer.task.model_source())

    def identity(self) -> dict:
        """The frozen base's identity (empty when everything trains); the fingerprint is computed once."""
        if not self.frozen:
            return {}
        if self._fingerprint is None:
            params = dict(self.model.named_parameters(remove_duplicate=False))
            self._fingerprint = fingerprint([(n, params[n]) for n in self.frozen])
        return {"tensors": len(self.frozen), "fingerprint": self._fingerprint, "source": self.source}

    def state_dict(self) -> tuple[dict[str, torch.Tensor], dict]:
        """(``model.*`` tensors without the frozen ones, ``{"frozen": identity}`` or {} when all trains)."""
        tensors = {f"model.{k}": v for k, v in self.model.state_dict().items() if k not in self.frozen}
        return tensors, ({"frozen": self.identity()} if self.frozen else {})

    def check(self, loaded: ckpt.Loaded) -> dict[str, torch.Tensor]:
        """The checkpoint's model tensors, checked against this model: CheckpointError for another shape,
        CheckpointMismatch for another frozen base. A checkpoint holding every tensor (a full save, or one
        written before trainable-only saves) loads as it is."""
        live = self.model.state_dict()
        saved = {k[len("model."):] for k in loaded.tensors if k.startswith("model.")}
        if not self.frozen or saved == set(live):
            return ckpt.model_state(loaded, live)
        theirs, mine = loaded.meta.get("frozen"), self.identity()
        if not isinstance(theirs, dict):
            raise ckpt.CheckpointError(f"{loaded.path}: holds {len(saved)} of this model's {len(live)} tensors "
                                       "and no identity of a frozen base; not this run's checkpoint")
        if theirs.get("source") != mine["source"]:
            raise ckpt.CheckpointMismatch(
                f"{loaded.path}: trained on base model {theirs.get('source')!r}, this run builds "
                f"{mine['source']!r}; resume with the same base (model path, shape and seed)")
        if theirs.get("fingerprint") != mine["fingerprint"]:
            raise ckpt.CheckpointMismatch(
                f"{loaded.path}: the frozen base weights differ from the ones it trained on (fingerprint "
                f"{str(theirs.get('fingerprint'))[:12]}…, this base {mine['fingerprint'][:12]}…); "
                f"the model at {mine['source']!r} has changed")
        return ckpt.model_state(loaded, {k: v for k, v in live.items() if k not in self.frozen})

    def load(self, state: dict[str, torch.Tensor]) -> None:
        """Load what ``check`` returned: every tensor strictly, or all but the frozen ones (kept as built)."""
        result = self.model.load_state_dict(state, strict=False)
        missing = set(result.missing_keys) - self.frozen
        if missing or result.unexpected_keys:  # check() compared the names already; this is its guarantee
            raise ckpt.CheckpointError(f"model state does not fit: missing {sorted(missing)[:3]}, "
                                       f"unexpected {sorted(result.unexpected_keys)[:3]}")
