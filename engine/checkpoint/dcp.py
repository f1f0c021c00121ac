"""The FSDP2 checkpoint format: one torch.distributed.checkpoint (DCP) directory per save, ``.metadata`` its commit.

A save is a directory ``checkpoints/step-NNNNNNNN/`` holding

- ``engine.safetensors``, the sidecar: everything but the weights (step, sample position, world size,
  config, RNG, schedule, the task's state) as one engine.checkpoint.format file (atomic, checksummed). Rank 0
  writes it *before* the shards, so it is never newer than the commit marker;
- ``__R_0.distcp``, each rank's shard of the model and optimizer (``get_state_dict``: FQN keys);
- ``.metadata``, which DCP's FileSystemWriter writes as ``.metadata.tmp`` and renames only after every
  rank's shards are written. A directory without it was cut off mid-save and is never loaded
  (``complete``); the loader falls back to the previous complete one.

DCP saves shards with their global offsets, so a checkpoint written by N ranks loads into M (DCP
reshards on load), into one process with a process group of one, or into a plain module with no
process group at all (``load_full``: the export command).

DCP's ``.metadata`` is a pickle (FileSystemReader unpickles it with ``pickle.load``), which would break
the engine's rule that a checkpoint never runs code when read. So every load here goes through
``SafeReader``: the same reader with an unpickler that resolves only the plain records DCP writes
(its metadata dataclasses, ``torch.Size``, dtypes, layouts); anything else is a CheckpointError. The
shards' own non-tensor items are read by DCP with ``torch.load(weights_only=True)``.

The optimizer is saved only once it has state: ``get_state_dict`` fills an empty optimizer's state with
a zero step (``_init_optim_state``), which would shift AdamW's bias correction by one step for a run
that checkpoints at step 0. A save without it (``meta["dcp_optimizer"]`` False) loads as an empty state.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.checkpoint import format as ckpt
from engine.core.safe_files import check_regular

#: The sidecar's file name inside a DCP directory.
SIDECAR = "engine.safetensors"
#: DCP's metadata file: written last, by rename; its presence is the commit marker.
MARKER = ".metadata"
#: Largest ``.metadata`` read: a few hundred bytes a tensor, so 256 MiB is a million-tensor model.
MAX_METADATA_BYTES = 256 << 20


#: What a DCP ``.metadata`` pickle may name: module → allowed names ("*": any name in that module).
ALLOWED_GLOBALS = {
    "torch.distributed.checkpoint.metadata": {"Metadata", "TensorStorageMetadata", "TensorProperties",
                                              "ChunkStorageMetadata", "BytesStorageMetadata", "MetadataIndex",
                                              "StorageMeta", "_MEM_FORMAT_ENCODING"},
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},  # a layout looked up by its name
    "torch": {"Size", "float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8",
              "bool", "complex64", "complex128"},
    "pathlib": {"PosixPath", "PurePosixPath"},  # built, never called: no getattr is allowed to reach a method
    "collections": {"OrderedDict"},
}


def _restricted_load(stream):
    """``pickle.load`` that resolves only ``ALLOWED_GLOBALS`` (CheckpointError naming anything else)."""
    import pickle

    class Restricted(pickle.Unpickler):
        def find_class(self, module: str, name: str):
            allowed = ALLOWED_GLOBALS.get(module)
            if allowed is None or (allowed != "*" and name not in allowed):
                raise ckpt.CheckpointError(f"DCP metadata names {module}.{name}: not a plain checkpoint record "
                                           "(refused: loading it could run code)")
            return super().find_class(module, name)

    return Restricted(stream).load()


def safe_reader(path: Path):
    """A FileSystemReader for ``path`` whose ``.metadata`` goes through the restricted unpickler."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class SafeReader(FileSystemReader):
        def read_metadata(self, *args, **kwargs):
            rank = kwargs.get("rank")
            with self.fs.create_stream(self._get_metadata_path(rank), "rb") as stream:
                metadata = _restricted_load(stream)
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeReader(str(path))


def complete(path: Path) -> bool:
    """True when ``path`` is a committed DCP checkpoint (its ``.metadata`` and sidecar both there, whatever
    they are: one that is not a regular file is a damaged checkpoint, refused by ``read_sidecar``, not a save
    cut off before its commit, which a resume would pass over and start the run again beside)."""
    return os.path.lexists(Path(path) / MARKER) and os.path.lexists(Path(path) / SIDECAR)


def read_sidecar(path: Path) -> ckpt.Loaded:
    """The sidecar of DCP directory ``path`` as a verified ``Loaded`` (its path the directory);
    CheckpointError for a directory cut off before its commit marker, a damaged sidecar, or any entry that
    is not a regular file (DCP's reader opens every shard with a blocking open: a FIFO hung the resume)."""
    path = Path(path)
    if not os.path.lexists(path / MARKER):
        raise ckpt.CheckpointError(f"{path}: incomplete DCP checkpoint (no {MARKER}: cut off mid-save)")
    for entry in sorted(path.iterdir()):
        try:
            check_regular(entry, MAX_METADATA_BYTES if entry.name == MARKER else None)
        except OSError as exc:
            raise ckpt.CheckpointError(f"{entry}: not a readable DCP checkpoint file ({exc.strerror})") from None
    loaded = ckpt.read(path / SIDECAR)
    loaded.path = path
    return loaded


def _state(model, optimizer, with_optimizer: bool) -> dict:
    """The DCP state dict ({"model": …, "optim": …}): references to the live (sharded) tensors."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    if not with_optimizer:
        return {"model": get_model_state_dict(model)}
    model_state, optim_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optim": optim_state}


def has_optimizer_state(optimizer) -> bool:
    """True once the optimizer has taken a step (an empty state is not saved, see the module docstring)."""
    return bool(optimizer.state)


def save_shards(path: Path, model, optimizer) -> None:
    """Every rank's shard of model and optimizer into ``path`` (a collective: every rank calls it)."""
    import torch.distributed.checkpoint as dcp

    dcp.save(_state(model, optimizer, has_optimizer_state(optimizer)), checkpoint_id=str(path))


def load(loaded: ckpt.Loaded, model, optimizer) -> None:
    """Model and optimizer from DCP directory ``loaded.path`` into the live (sharded or plain) ones, resharded
    as needed (a collective under a process group); CheckpointError when they do not fit.

    DCP plans the whole read first (a missing key or a shape mismatch fails before any tensor is
    touched); a shard unreadable mid-read leaves the model part-loaded, which the caller's fallback to an
    older checkpoint overwrites in full.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

    with_optimizer = bool(loaded.meta.get("dcp_optimizer", True))
    state = _state(model, optimizer, with_optimizer)
    try:
        dcp.load(state, storage_reader=safe_reader(loaded.path))
    except errors() as exc:  # DCP wraps every rank's failure in CheckpointException, raised on all ranks
        raise ckpt.CheckpointError(f"{loaded.path}: DCP checkpoint does not load into this model "
                                   f"({failure_text(exc)})") from None
    if with_optimizer:
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    else:
        set_model_state_dict(model, state["model"])
        optimizer.state.clear()  # saved before the first step: no moments yet (a rollback to it drops ours)


def load_full(path: Path, model) -> None:
    """The model's weights from DCP directory ``path`` into a plain module in one process, no process group:
    every shard gathered into full tensors (export). CheckpointError when they do not fit."""
    import torch.distributed.checkpoint as dcp

    from engine.distributed.fsdp import scalarize, vectorize_scalars

    scalars = vectorize_scalars(model)  # as FSDP2 trained (and saved) them
    state = {"model": model.state_dict()}
    try:
        dcp.load(state, storage_reader=safe_reader(path), no_dist=True)
        model.load_state_dict(state["model"], strict=True)
    except errors() as exc:
        raise ckpt.CheckpointError(f"{path}: DCP checkpoint does not fit this model ({failure_text(exc)})") from None
    finally:
        scalarize(model, scalars)


def failure_text(exc: BaseException) -> str:
    """One line (clipped) of why DCP failed: a CheckpointException's first failing rank's own message."""
    failures = getattr(exc, "failures", None)
    if failures:
        rank, (inner, _) = min(failures.items(), key=lambda item: item[0])
        exc = inner
        prefix = f"rank {rank}: "
    else:
        prefix = ""
    text = prefix + (" ".join(str(exc).split()) or type(exc).__name__)
    return text if len(text) <= 240 else text[:239] + "…"


def errors():
    """What a DCP call raises: ordinary exceptions and CheckpointException (a BaseException)."""
    from torch.distributed.checkpoint.api import CheckpointException

    return (Exception, CheckpointException)


def size(path: Path) -> int:
    """Bytes of every file in one checkpoint directory."""
    return sum(p.stat().st_size for p in Path(path).iterdir() if p.is_file())
