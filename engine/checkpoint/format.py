"""Atomic, verified, code-free checkpoints: one safetensors file each, JSON metadata inside.

A checkpoint is a single ``.safetensors`` file: model weights (``model.*``),
optimizer state (``optim.*``), RNG states (``rng.*``) as tensors; everything
else (step, data position, config, scheduler/scaler state, the task's state,
best-so-far) as JSON in the header's metadata, with a manifest of SHA-256
digests per tensor and of the JSON itself. Nothing is ever unpickled.

Writes are atomic: temp file in the same directory → flush → fsync → rename
→ fsync the directory. Before ``last`` is replaced, the old one is renamed to
``last.prev``; a crash between the two renames leaves ``last.prev`` for the
loader's fallback (engine.checkpoint.store, which also finds DCP directories).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from engine.core.safe_files import check_regular, fsync_dir, open_for_write
from engine.run.rundir import pid_alive

#: Format version written into every checkpoint's metadata.
FORMAT_VERSION = 1



class CheckpointError(Exception):
    """A checkpoint that cannot be used (missing, truncated, tampered, wrong shape); one-line message."""


class CheckpointMismatch(CheckpointError):
    """An intact checkpoint that is not this run's state (optimizer state that does not hash to its recorded
    digest, another frozen base model): the resume is refused outright rather than skipped for an older file,
    since an edit or a bug is something to look at, not damage to work around (and a base shared by every file
    would refuse them all anyway)."""


class CheckpointForeign(CheckpointMismatch):
    """An intact checkpoint of another run (another run id) or another task: never resumed into this run's
    history, and refused rather than passed over (a file dropped into the wrong directory is a mistake to see)."""


class CheckpointShape(CheckpointError):
    """An intact checkpoint whose model is shaped otherwise than the one this config builds (a flag given with
    the resume changed it): not damage, and said so when no checkpoint fits."""


class CheckpointWriteError(Exception):
    """A save failed (disk full, read-only, I/O error); the previous checkpoint is untouched."""


@dataclass
class Loaded:
    """A verified checkpoint: its tensors, its JSON metadata, where it came from and what was skipped."""

    path: Path
    tensors: dict[str, torch.Tensor]
    meta: dict[str, Any]
    skipped: list[str] = field(default_factory=list)


def _digest(tensor: torch.Tensor) -> str:
    data = tensor.detach().cpu().contiguous()
    # bf16 has no numpy dtype: hash its raw bytes through an int16 view.
    if data.dtype == torch.bfloat16:
        data = data.view(torch.int16)
    return hashlib.sha256(data.numpy().tobytes()).hexdigest()


def optimizer_digest(tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 over the optimizer's tensors in name order: equal digests mean identical optimizer state."""
    h = hashlib.sha256()
    for name in sorted(k for k in tensors if k.startswith("optim.")):
        h.update(name.encode())
        h.update(bytes.fromhex(_digest(tensors[name])))
    return h.hexdigest()


def verify_optimizer(optimizer: torch.optim.Optimizer, loaded: Loaded) -> str:
    """Recompute the digest of ``optimizer`` as loaded from ``loaded`` and compare it with the one the file
    recorded: CheckpointMismatch when they differ; else the line saying what was checked."""
    want = loaded.meta.get("optimizer_digest")
    if want is None:
        return f"{loaded.path} records no optimizer digest (older format); optimizer state not verified"
    got = optimizer_digest(optimizer_tensors(optimizer)[0])
    if got != want:
        raise CheckpointMismatch(f"{loaded.path}: optimizer state as loaded has sha256 {got[:16]}…, the checkpoint "
                                 f"recorded {str(want)[:16]}…; refusing to resume from optimizer state that is not "
                                 "what was saved")
    return f"optimizer state sha256 {got[:16]}… matches {loaded.path}"


def write(path: Path, tensors: dict[str, torch.Tensor], meta: dict[str, Any], keep_previous: bool = False,
          before_commit: Callable[[Path], None] | None = None) -> int:
    """Write one checkpoint atomically; returns its size in bytes. Raises CheckpointWriteError on failure.

    ``before_commit(tmp)`` runs after the temp file is fsynced and before the rename that commits it (a test
    hook: engine.training.faults' slow_save sleeps there so a kill can land mid-write)."""
    path = Path(path)
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    meta_json = json.dumps(meta, separators=(",", ":"), allow_nan=True)
    manifest = {name: _digest(t) for name, t in tensors.items()}
    header = {
        "format": str(FORMAT_VERSION),
        "meta": meta_json,
        "meta_sha256": hashlib.sha256(meta_json.encode()).hexdigest(),
        "manifest": json.dumps(manifest, separators=(",", ":")),
    }
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(path.parent)
        tmp.unlink(missing_ok=True)  # our own pid's (a reused pid), or anything planted there: never written through
        os.close(open_for_write(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
        save_file(tensors, str(tmp), metadata=header)
        fd = open_for_write(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        if before_commit is not None:
            before_commit(tmp)
        if keep_previous and path.exists():
            os.replace(path, path.with_name(path.stem + ".prev" + path.suffix))
        os.replace(tmp, path)
        fsync_dir(path.parent)
        return size
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise CheckpointWriteError(f"{path}: {exc.strerror or exc}") from None
    except Exception as exc:  # safetensors raises its own error types on write failures
        try:
            tmp.unlink()
        except OSError:
            pass
        raise CheckpointWriteError(f"{path}: {exc}") from None


def remove_stale_temps(directory: Path, pattern: str = ".*.safetensors.tmp-*") -> int:
    """Delete temp files (``pattern``, ending in ``-<pid>``) that killed writers left behind (their pid is gone);
    returns how many.

    A SIGKILL or power cut mid-write leaves ``.<name>.tmp-<pid>``: never loaded, but a
    checkpoint's worth of disk each, so a run killed often would fill the disk with them.
    Costs one directory listing per save. (The plain-loop integration's ``last.pt`` has its own pattern.)
    """
    removed = 0
    for tmp in Path(directory).glob(pattern):
        pid = tmp.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or int(pid) == os.getpid() or pid_alive(int(pid)):
            continue
        try:
            tmp.unlink()
            removed += 1
        except OSError:
            pass
    return removed


def read(path: Path) -> Loaded:
    """Load and verify one checkpoint file; CheckpointError if it is truncated, tampered or not ours.
    (engine.checkpoint.store reads any checkpoint, a DCP directory too.)"""
    path = Path(path)
    try:
        check_regular(path)  # a FIFO or a device in a checkpoint's place is damage: never a hang
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint") from None
    except OSError as exc:
        raise CheckpointError(f"{path}: not a readable checkpoint ({exc.strerror})") from None
    try:
        with safe_open(str(path), framework="pt") as handle:
            header = handle.metadata() or {}
            names = list(handle.keys())
            tensors = {name: handle.get_tensor(name) for name in names}
    except Exception as exc:  # truncated or garbage files fail inside safetensors' parser
        raise CheckpointError(f"{path}: not a readable checkpoint ({str(exc).splitlines()[0][:120]})") from None
    if header.get("format") != str(FORMAT_VERSION):
        raise CheckpointError(f"{path}: not a sensorlm-tui checkpoint (format {header.get('format')!r})")
    meta_json = header.get("meta", "")
    if hashlib.sha256(meta_json.encode()).hexdigest() != header.get("meta_sha256"):
        raise CheckpointError(f"{path}: metadata checksum mismatch (file damaged or edited)")
    try:
        meta = json.loads(meta_json)
        manifest = json.loads(header.get("manifest", ""))
    except ValueError:
        raise CheckpointError(f"{path}: metadata is not valid JSON") from None
    if not isinstance(meta, dict) or not isinstance(manifest, dict):
        raise CheckpointError(f"{path}: metadata is not a JSON object")
    if set(manifest) != set(tensors):
        raise CheckpointError(f"{path}: tensor list does not match its manifest")
    for name, tensor in tensors.items():
        if _digest(tensor) != manifest[name]:
            raise CheckpointError(f"{path}: tensor {name} fails its checksum (file damaged)")
    return Loaded(path=path, tensors=tensors, meta=meta)


# -- metadata validation ----------------------------------------------------------------
def _bad(loaded: Loaded, what: str) -> CheckpointError:
    return CheckpointError(f"{loaded.path}: checkpoint metadata is incomplete or invalid ({what})")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: An abort policy's state as checkpoints hold it (engine.training.policies.AbortPolicy.state), and the keys older
#: checkpoints held instead: before the step a primary metric stopped being finite was kept, and before that
#: the rule's settings, which now come from the run's config.
_ABORT_KEYS = {"best", "reference", "strikes", "streak_step", "streak_s", "not_finite_from"}
_ABORT_KEYS_BEFORE = ({"best", "reference", "strikes", "streak_step", "streak_s"},
                      {"drop", "patience", "higher_is_better", "best", "strikes"})


def _abort_state_ok(abort: dict) -> bool:
    def optional(key: str, check) -> bool:
        return abort.get(key) is None or check(abort[key])

    return set(abort) in (_ABORT_KEYS, *_ABORT_KEYS_BEFORE) and _is_int(abort["strikes"]) and abort["strikes"] >= 0 \
        and optional("best", _is_number) and optional("reference", _is_number) \
        and optional("streak_step", lambda v: _is_int(v) and v >= 0) \
        and optional("not_finite_from", lambda v: _is_int(v) and v >= 0) \
        and optional("streak_s", lambda v: _is_number(v) and 0 <= v < float("inf")) \
        and optional("drop", _is_number) and optional("patience", _is_int) \
        and optional("higher_is_better", lambda v: isinstance(v, bool))


def validate_meta(loaded: Loaded) -> None:
    """CheckpointError naming the first metadata field whose type or range no run could have written.

    A careful forger (or a bug) can recompute the checksum after an edit; this
    is the check that makes such a file a skipped candidate instead of a crash
    at the first step. Shapes against the model are checked where the model is
    (engine.checkpoint.manager).
    """
    meta = loaded.meta
    try:
        for key, low in (("step", 0), ("epoch", 0), ("position", 0), ("batch_size", 1), ("grad_accum", 1),
                         ("total_steps", 0), ("params", 0)):
            if not _is_int(meta[key]) or meta[key] < low:
                raise _bad(loaded, f"{key}={meta[key]!r}: must be an integer >= {low}")
        if meta["grad_accum"] > meta["batch_size"]:
            raise _bad(loaded, f"grad_accum={meta['grad_accum']}: more than batch_size={meta['batch_size']}")
        for key in ("peak_lr", "lr_scale"):
            if not _is_number(meta[key]) or not 0 < meta[key] < float("inf"):
                raise _bad(loaded, f"{key}={meta[key]!r}: must be a positive number")
        if meta.get("first_val_loss") is not None and not _is_number(meta["first_val_loss"]):
            raise _bad(loaded, f"first_val_loss={meta['first_val_loss']!r}: must be a number or null")
        for key in ("optimizer", "rng", "abort", "nan", "config", "task_state", "scaler"):
            if not isinstance(meta.get(key, {}), dict):
                raise _bad(loaded, f"{key}: must be a JSON object")
        groups, scalars = meta["optimizer"]["param_groups"], meta["optimizer"].get("scalars", {})
        if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups) \
                or not isinstance(scalars, dict):
            raise _bad(loaded, "optimizer: param_groups must be a list of objects, scalars an object")
        numpy_state, python_state = meta["rng"]["numpy"], meta["rng"]["python"]
        if not (isinstance(numpy_state, list) and len(numpy_state) == 4 and isinstance(numpy_state[0], str)
                and all(_is_number(v) for v in numpy_state[1:])):
            raise _bad(loaded, "rng.numpy: must be [kind, pos, has_gauss, cached]")
        if not (isinstance(python_state, list) and len(python_state) == 3 and _is_int(python_state[0])
                and isinstance(python_state[1], list) and all(_is_int(v) for v in python_state[1])):
            raise _bad(loaded, "rng.python: must be [version, [ints], gauss]")
        abort, nan = meta["abort"], meta["nan"]
        if not _abort_state_ok(abort):
            raise _bad(loaded, f"abort={abort!r}: not an abort policy's state")
        if set(nan) != {"patience", "consecutive", "total"} or not all(_is_int(v) and v >= 0 for v in nan.values()):
            raise _bad(loaded, f"nan={nan!r}: not a NaN guard's state")
    except KeyError as exc:
        raise _bad(loaded, f"missing {exc}") from None
    except TypeError as exc:
        raise _bad(loaded, str(exc)[:120]) from None


def check_provenance(loaded: Loaded, run_id: str, task: str) -> None:
    """CheckpointForeign unless ``loaded`` was written by the run ``run_id`` of task ``task`` (both from the run's
    config.toml). The run id is in the checkpoint's config (``RunConfig.run_id``); a run and checkpoints made
    before run ids existed have none on either side, and are judged by their task alone."""
    config = loaded.meta.get("config")
    config = config if isinstance(config, dict) else {}
    section = config.get("task")
    theirs_task = section.get("name") if isinstance(section, dict) else None
    if task and isinstance(theirs_task, str) and theirs_task != task:
        raise CheckpointForeign(f"{loaded.path}: a checkpoint of task {theirs_task!r}, and this run trains {task!r} "
                                "(its config.toml): not resumed into it; move it out of checkpoints/")
    theirs_id = config.get("run_id") or ""
    if (run_id or theirs_id) and theirs_id != run_id:
        raise CheckpointForeign(f"{loaded.path}: a checkpoint of another run (run id {str(theirs_id)[:64] or 'none'}; "
                                f"this run's, in its config.toml, is {run_id or 'none'}): not resumed into it; "
                                "move it out of checkpoints/")


# -- state capture -----------------------------------------------------------------------
def optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """Split an optimizer state_dict into tensors (``optim.<param>.<key>``) and JSON (param groups, scalars)."""
    state = optimizer.state_dict()
    tensors, scalars = {}, {}
    for index, values in state["state"].items():
        for key, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optim.{index}.{key}"] = value
            else:
                scalars[f"{index}.{key}"] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def restore_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict) -> None:
    """Inverse of optimizer_tensors; CheckpointError when the state does not fit this model."""
    state: dict[int, dict] = {}
    for name, value in tensors.items():
        if not name.startswith("optim."):
            continue
        _, index, key = name.split(".", 2)
        state.setdefault(int(index), {})[key] = value
    for name, value in meta.get("scalars", {}).items():
        index, key = name.split(".", 1)
        state.setdefault(int(index), {})[key] = value
    try:
        optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    except (ValueError, KeyError, RuntimeError) as exc:
        raise CheckpointError(f"optimizer state does not match this model ({exc})") from None
    for param, values in optimizer.state.items():  # as in model_state: a 0-dim state of a (1,) parameter
        for key, value in values.items():
            if key != "step" and torch.is_tensor(value) and value.dim() == 0 and tuple(param.shape) == (1,):
                values[key] = value = value.reshape(1)
            if torch.is_tensor(value) and value.shape == param.shape and value.stride() != param.stride():
                # Files hold tensors row-major; AdamW made its state in the parameter's layout (``zeros_like``;
                # e.g. a channels-last conv weight). Fused AdamW pairs parameter and state by memory position,
                # so a state restored row-major beside a channels-last weight steps differently (measured: the
                # gap-filler's resume stopped being bit-exact): each state goes back into its parameter's layout.
                values[key] = torch.empty_like(param).copy_(value)


def seed_all(seed: int) -> None:
    """Seed every RNG stream ``rng_capture`` records: python's, numpy's global and torch's."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_capture() -> tuple[dict[str, torch.Tensor], dict]:
    """All RNG states: torch (CPU and every CUDA device), numpy's global, python's."""
    tensors = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = s
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    tensors["rng.numpy"] = torch.from_numpy(np.asarray(keys, dtype=np.uint32).view(np.int32).copy())
    version, internal, gauss = random.getstate()
    meta = {"numpy": [kind, int(pos), int(has_gauss), float(cached)],
            "python": [version, list(internal), gauss]}
    return tensors, meta


def model_state(loaded: Loaded, live: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The checkpoint's model tensors (``model.`` prefix off), checked against the live model's state_dict
    ``live``: the same names and shapes, else CheckpointError naming the first that differs."""
    state = {k[len("model."):]: v for k, v in loaded.tensors.items() if k.startswith("model.")}
    for name, value in state.items():  # a scalar parameter now shaped (1,) (FSDP2 shards dim 0) loads as one
        if name in live and value.dim() == 0 and tuple(live[name].shape) == (1,):
            state[name] = value.reshape(1)
    wrong = sorted(set(live) ^ set(state)) or [k for k in live if live[k].shape != state[k].shape]
    if wrong:
        name = wrong[0]
        have = tuple(state[name].shape) if name in state else "missing"
        want = tuple(live[name].shape) if name in live else "none"
        raise CheckpointShape(f"{loaded.path}: checkpoint is from another model shape ({name}: {have}, "
                              f"this model: {want})")
    return state


def check_rng(tensors: dict[str, torch.Tensor]) -> None:
    """ValueError when the RNG tensors are not what rng_capture writes (checked before anything is restored)."""
    for name, shape in (("rng.torch", tuple(torch.get_rng_state().shape)), ("rng.numpy", (624,))):
        if name not in tensors or tuple(tensors[name].shape) != shape:
            raise ValueError(f"{name}: shape {tuple(tensors[name].shape) if name in tensors else 'missing'}, "
                             f"want {shape}")


def rng_restore(tensors: dict[str, torch.Tensor], meta: dict) -> None:
    """Inverse of rng_capture."""
    torch.set_rng_state(tensors["rng.torch"])
    cuda = [tensors[k] for k in sorted(t for t in tensors if t.startswith("rng.cuda."))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda[: torch.cuda.device_count()])
    kind, pos, has_gauss, cached = meta["numpy"]
    np.random.set_state((kind, tensors["rng.numpy"].numpy().view(np.uint32), pos, has_gauss, cached))
    version, internal, gauss = meta["python"]
    random.setstate((version, tuple(internal), gauss))


def timed_write(path: Path, tensors: dict, meta: dict, keep_previous: bool,
                before_commit: Callable[[Path], None] | None = None) -> tuple[int, float]:
    """write() plus its wall time in seconds."""
    start = time.perf_counter()
    size = write(path, tensors, meta, keep_previous, before_commit)
    return size, time.perf_counter() - start
