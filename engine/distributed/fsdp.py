"""FSDP2 (``torch.distributed.fsdp.fully_shard``): each rank holds 1/world of every parameter, gradient and
optimizer state; the strategy the Trainer trains through when ``runtime.strategy = "fsdp2"``.

Wrapping is bottom-up, as FSDP2 wants it: each of the task's shard units (``Task.shard_units``: by
default every element of every ``nn.ModuleList``, i.e. transformer blocks), then the root, which keeps
whatever is left (embeddings, heads). Parameters become DTensors sharded on dim 0 with their names
unchanged, so the optimizer is built after wrapping (the Trainer does) and the state-dict names match
one process's. Gradient accumulation skips the reduce-scatter on every micro-batch but a step's last
(``set_requires_gradient_sync``), as DDP's ``no_sync`` does.

Precision (``MixedPrecisionPolicy``): on CUDA a bf16/fp16 run computes in that dtype with fp32 sharded
master weights and fp32 gradient reduction; on CPU everything stays fp32 (the policy casts nothing).

Checkpoints are DCP directories written by every rank (engine.checkpoint.dcp, .sharded_checkpointer).
Outside torchrun (no ``--nproc-per-node``) the strategy joins a process group of one of its own, so a
run is fsdp2 for its whole life and its checkpoints resume on any number of ranks.
"""

from __future__ import annotations

from contextlib import contextmanager

from engine.distributed.parallel import Ddp


def precision_policy(precision: str, device_type: str):
    """FSDP2's MixedPrecisionPolicy for the run's ``runtime.precision`` on ``device_type``."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    if device_type != "cuda" or dtype is None:
        return MixedPrecisionPolicy()  # fp32: CPU kernels in bf16 are slower and the toy's losses must match
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)


def vectorize_scalars(model) -> list[str]:
    """Make each 0-dim parameter a 1-element vector, in place; their names. FSDP2 refuses to shard scalars
    (e.g. a CLIP logit scale), and a (1,) tensor broadcasts exactly as a () one does, so the maths is
    unchanged; DCP checkpoints then hold the (1,) shape (``dcp.load_full`` turns it back)."""
    from torch import nn

    names = []
    for prefix, module in model.named_modules():
        for name, param in list(module.named_parameters(recurse=False)):
            if param.ndim == 0:
                setattr(module, name, nn.Parameter(param.detach().reshape(1).clone(),
                                                   requires_grad=param.requires_grad))
                names.append(f"{prefix}.{name}" if prefix else name)
    return names


def scalarize(model, names: list[str]) -> None:
    """Undo ``vectorize_scalars`` for ``names`` (the values kept)."""
    from torch import nn

    for dotted in names:
        owner, _, name = dotted.rpartition(".")
        module = model.get_submodule(owner) if owner else model
        param = getattr(module, name)
        setattr(module, name, nn.Parameter(param.detach().reshape(()).clone(), requires_grad=param.requires_grad))


class Fsdp2(Ddp):
    """fully_shard over the default process group; collectives, telemetry and agreement are DDP's."""

    #: Every rank writes its shard of each checkpoint (into the shared run directory).
    writes_shards = True
    strategy = "fsdp2"

    def __init__(self, device_type: str = "cpu", precision: str = "fp32", timeout_s: float = 300.0) -> None:
        """Join torchrun's process group, or outside torchrun a group of one (an in-memory store, no port)."""
        import os

        import torch.distributed as dist

        if "RANK" not in os.environ and not dist.is_initialized():
            dist.init_process_group("nccl" if device_type == "cuda" else "gloo", store=dist.HashStore(), rank=0,
                                    world_size=1)
        super().__init__(device_type, timeout_s)
        self.device_type, self.precision = device_type, precision
        self._root = None

    def wrap(self, model, units=()):
        """Shard each of ``units`` then ``model`` itself, in place; returns ``model`` (now an FSDPModule)."""
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(self.device_type, (self.world,))
        policy = precision_policy(self.precision, self.device_type)
        vectorize_scalars(model)
        for unit in units:
            fully_shard(unit, mesh=mesh, mp_policy=policy)
        self._root = fully_shard(model, mesh=mesh, mp_policy=policy)
        return model

    @contextmanager
    def sync(self, final: bool):
        """Reduce-scatter gradients only on a step's last micro-batch (the others accumulate unsharded)."""
        if self._delay and final:
            import time

            time.sleep(self._delay)  # test hook (telemetry.SLOW_ENV), as under DDP
        if self._root is not None:
            self._root.set_requires_gradient_sync(final)
        with self.collective("gradient reduce-scatter"):  # a hung peer's timeout is reported, not raised raw
            yield

