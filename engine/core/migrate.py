"""Versioned migration of what older releases wrote: config dicts, events, status records. Torch-free.

Version 1 (every release before task-owned configuration) had one config shape for
every task: ``[model]`` and ``[data]`` held SensorLM's fields (the toy task read a few
of them), ``train.abort_drop_db`` was in dB, ``EvalDone`` carried ``psnr_db`` and
``extra``, and ``status.json`` had ``best_psnr``. Version 2 gives each task its own
section under its name (``[sensorlm.model]``, ``[toy]``), keeps ``data.path`` as the
one shared data source, and names the primary metric wherever a best value is kept.
Version 3 splits v2's one ``[train]`` table into the sections of the components that
read them: ``train`` (what and how long), ``optimizer``, ``schedule``, ``evaluation``,
``policies`` and ``runtime`` (``LAYOUT_3``). An old key in a new file or a ``--set``
flag is moved too: the caller gets the (old, new) pairs, to tell the user in one line.

The old names have to appear here to be migrated, which is why this module (with the
task registry and the SensorLM package) is allowed to name them by the source-scan
test. Each function is idempotent: a v2 input comes back as it went in.
"""

from __future__ import annotations

from typing import Any

#: Version of the config layout written as ``version`` in config.toml and checkpoints.
CONFIG_VERSION = 3

#: Layout 3: each v2 ``train.<key>`` that moved → its new dotted path (the rest of [train] stays).
LAYOUT_3: dict[str, str] = {
    **{key: f"optimizer.{key}" for key in ("lr", "betas", "eps", "weight_decay", "clip_grad_norm")},
    "schedule": "schedule.kind",
    **{key: f"schedule.{key}" for key in ("warmup_frac", "cooldown_frac", "min_lr_frac")},
    "eval_every": "evaluation.every",
    **{key: f"evaluation.{key}" for key in ("overfit", "overfit_target", "overfit_gate", "overfit_gate_steps")},
    **{key: f"policies.{key}" for key in ("abort_drop", "abort_patience", "abort_patience_steps", "abort_patience_s",
                                          "nan_policy", "nan_patience", "rollback_lr_factor", "oom_recovery",
                                          "on_hangup")},
    **{key: f"runtime.{key}" for key in ("device", "precision", "prefetch", "data_workers", "threads", "strategy",
                                         "step_readback", "compile", "compile_backend", "collective_timeout_s")},
}

#: v1 key → toy key (toy read these of [model] and [data]; the rest it ignored).
_TOY_MODEL = {"dim": "dim", "depth": "depth", "dropout": "dropout"}
_TOY_DATA = {"channels": "channels", "minutes": "length", "train_samples": "train_samples",
             "val_samples": "val_samples", "mask_ratio": "mask_ratio", "seed": "seed"}
#: The only metric v1 could name as primary, and its unit.
V1_PRIMARY = "psnr_db"


def is_v1_config(data: Any) -> bool:
    """A config dict in the v1 shape: no ``version``, and a ``[model]`` section or task fields in ``[data]``."""
    if not isinstance(data, dict) or "version" in data:
        return False
    section, train = data.get("data"), data.get("train")
    return "model" in data or (isinstance(section, dict) and bool(set(section) - {"path"})) or \
        (isinstance(train, dict) and "abort_drop_db" in train)


class LayoutConflict(ValueError):
    """One field given under its old and its new name; ``str()`` names both."""


def moved(dotted: str) -> str | None:
    """The layout-3 path of a v2 dotted path (``train.lr`` → ``optimizer.lr``); None when it did not move."""
    section, _, key = dotted.partition(".")
    return LAYOUT_3.get(key) if section == "train" else None


def config(data: Any, moves: list[tuple[str, str]] | None = None) -> Any:
    """A current config dict from an older one; anything else comes back unchanged (the validator judges it).

    ``moves`` (when given) gets one (old, new) dotted pair per key moved to its layout-3 section; LayoutConflict
    when a dict holds a field under both names."""
    data = _split_train(_v1_to_v2(data), moves)
    if isinstance(data, dict) and isinstance(data.get("version"), int) and data["version"] < CONFIG_VERSION:
        data = {**data, "version": CONFIG_VERSION}
    return data


def _split_train(data: Any, moves: list[tuple[str, str]] | None) -> Any:
    """Layout 3 from layout 2: the keys of ``[train]`` that moved, in their sections (idempotent)."""
    train = data.get("train") if isinstance(data, dict) else None
    if not isinstance(train, dict) or not set(train) & set(LAYOUT_3):
        return data
    out = {**data, "train": dict(train)}
    for key in train:
        section, _, new = LAYOUT_3.get(key, ".").partition(".")
        if not section or (section in out and not isinstance(out[section], dict)):
            continue  # not moved; or its section is not a table (`runtime = 5`): the validator names that
        table = dict(out.get(section) or {})
        if new in table:
            raise LayoutConflict(f"train.{key} and {section}.{new} are the same field (train.{key} is its name "
                                 f"before config layout 3); give it once, as {section}.{new}")
        table[new] = out["train"].pop(key)
        out[section] = table
        if moves is not None:
            moves.append((f"train.{key}", f"{section}.{new}"))
    return out


def _v1_to_v2(data: Any) -> Any:
    """A v2 config dict from a v1 one (anything else comes back unchanged)."""
    if not is_v1_config(data):
        return data
    out = {k: v for k, v in data.items() if k not in ("model", "data")}
    task = data.get("task") if isinstance(data.get("task"), dict) else {}
    name = task.get("name", "sensorlm")
    model = data.get("model") if isinstance(data.get("model"), dict) else {}
    old_data = data.get("data") if isinstance(data.get("data"), dict) else {}
    # v1 read data.path only when data.source was "csv"; v2 reads it whenever it is set.
    source = old_data.get("source", "synthetic")
    out["data"] = {"path": old_data["path"]} if source == "csv" and old_data.get("path") else {}
    if name == "sensorlm":
        out["sensorlm"] = {"model": dict(model),
                           # every other key too, so a typo in an old file is still an "unknown key" error
                           "data": {k: v for k, v in old_data.items() if k not in ("source", "path")}}
    elif name == "toy":
        section = {new: model[old] for old, new in _TOY_MODEL.items() if old in model}
        section.update({new: old_data[old] for old, new in _TOY_DATA.items() if old in old_data})
        out["toy"] = section
    # Any other v1 task could not have had a section of its own: it keeps only the shared ones.
    train = out.get("train")
    if isinstance(train, dict) and "abort_drop_db" in train:
        train = dict(train)
        train["abort_drop"] = train.pop("abort_drop_db")  # v1's only primary metric was PSNR in dB
        out["train"] = train
    out["version"] = 2
    return out


def event(record: dict) -> dict:
    """A schema-2 event record from a schema-1 one, a RunStarted's config in the current layout (idempotent;
    other types pass through)."""
    kind = record.get("type")
    if kind == "eval" and ("psnr_db" in record or "extra" in record):
        out = {k: v for k, v in record.items() if k not in ("psnr_db", "extra")}
        psnr = record.get("psnr_db")
        if not record.get("metrics"):
            metrics = {"val_loss": record.get("val_loss")}
            if psnr is not None:
                metrics[V1_PRIMARY] = psnr
            metrics.update(record.get("extra") or {})
            out["metrics"] = metrics
        if not record.get("primary"):
            out["primary"] = V1_PRIMARY if psnr is not None else "val_loss"
        return out
    if kind == "run_started":
        out = dict(record)
        if is_v1_config(record.get("config")):  # a run of an early release: v1 config, no capabilities
            out["config"] = config(record["config"])
            if not record.get("capabilities"):
                out["capabilities"] = _builtin_capabilities(record.get("task") or "")
        elif _engine_config_before_3(record.get("config")):  # viewers read one layout: the current one
            out["config"] = config(record["config"])
        return out
    return record


def _engine_config_before_3(data: Any) -> bool:
    """An engine's config of layout 2 (an integration's free-form config carries no version and stays as is)."""
    return isinstance(data, dict) and isinstance(data.get("version"), int) and data["version"] < CONFIG_VERSION


def _builtin_capabilities(task: str) -> dict:
    """What a v1 run of a built-in task declares today (v1 runs carried none); {} for other tasks."""
    from engine.core import registry as tasks

    if task not in tasks.BUILTIN_SPECS:
        return {}
    return tasks.get_spec(task).capabilities.to_dict()


def status(record: dict) -> dict:
    """A v2 status record from a v1 one: ``best_psnr`` becomes ``best`` with ``best_metric``."""
    if "best_psnr" not in record:
        return record
    out = {k: v for k, v in record.items() if k != "best_psnr"}
    out.setdefault("best", record["best_psnr"])
    out.setdefault("best_metric", V1_PRIMARY)
    return out


#: The event schema from which a run keeps every step in its step record (``steps/``) and its events.jsonl may
#: hold step lines only at a cadence. A run of an earlier schema has every step in its log alone: its record is
#: converted from the log once (engine.run.steps.convert), which never changes the log.
STEP_RECORD_SCHEMA = 3


def steps_in_log(schema: int) -> bool:
    """Whether a log of event schema ``schema`` holds every step of its run (so a record is built from it)."""
    return schema < STEP_RECORD_SCHEMA


#: The name engine.run.history.store applies to every record it reads.
migrate_record = event
