"""Exports besides checkpoints: a PEFT adapter directory, or a ``save_pretrained`` model directory.

Both are written the way checkpoints are: into a temporary sibling directory,
each file fsynced, then renamed into place (the previous export, if any, is
moved aside first and removed only after the new one is in place), so a
crash mid-write never leaves a half-written export under the final name.

The adapter is what peft's ``save_pretrained`` writes (``adapter_config.json``
and ``adapter_model.safetensors``), and the writer then checks the config
holds ``peft_type``, ``r``, ``lora_alpha``, ``target_modules`` and
``task_type``: without ``lora_alpha`` or ``target_modules``, peft's loader
falls back to defaults and loads a *different* model without a warning
(research/wave2.md), so a config missing one is a bug to stop on, not a file
to ship.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from torch import nn

from engine.checkpoint.format import fsync_dir
from engine.tasks.protocol import TaskError

#: adapter_config.json keys peft needs to rebuild the *same* adapter.
REQUIRED_ADAPTER_KEYS = ("peft_type", "r", "lora_alpha", "target_modules", "task_type")
KINDS = ("peft_adapter", "pretrained")


def _is_peft(model: nn.Module) -> bool:
    return hasattr(model, "peft_config")


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    fsync_dir(root)


def _commit(tmp: Path, out: Path) -> None:
    """Rename ``tmp`` onto ``out`` (the old ``out`` moved aside first, deleted last)."""
    _fsync_tree(tmp)
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    if out.exists():
        os.replace(out, old)
    os.replace(tmp, out)
    fsync_dir(out.parent)
    shutil.rmtree(old, ignore_errors=True)


def check_adapter_config(directory: Path) -> dict:
    """The adapter's config, or TaskError naming the first required key it lacks."""
    config = json.loads((directory / "adapter_config.json").read_text("utf-8"))
    for key in REQUIRED_ADAPTER_KEYS:
        if config.get(key) in (None, [], ""):
            raise TaskError(f"{directory}/adapter_config.json: {key} missing; peft would load a different adapter")
    return config


def export(model: nn.Module, out_dir: str | Path, kind: str | None = None, tokenizer=None) -> Path:
    """Write ``kind`` (default: peft_adapter for a LoRA model, pretrained otherwise) atomically to ``out_dir``."""
    out = Path(out_dir)
    kind = kind or ("peft_adapter" if _is_peft(model) else "pretrained")
    if kind not in KINDS:
        raise TaskError(f"export kind {kind!r}; allowed: {', '.join(KINDS)}")
    if kind == "peft_adapter" and not _is_peft(model):
        raise TaskError("export peft_adapter: this run trains the full model (lm.finetune='full'); "
                        "export 'pretrained' instead")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        if kind == "peft_adapter":
            model.save_pretrained(str(tmp), safe_serialization=True)
            check_adapter_config(tmp)
        else:
            # A LoRA model exports merged weights: the base with every adapter folded in (on a copy).
            target = model
            if _is_peft(model):
                import copy

                target = copy.deepcopy(model).merge_and_unload()
            target.save_pretrained(str(tmp), safe_serialization=True)
            if tokenizer is not None:
                tokenizer.save_pretrained(str(tmp))
        _commit(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
