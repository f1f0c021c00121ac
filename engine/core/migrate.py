"""Versioned migration of what older releases wrote: config dicts, events, status records. Torch-free.

Version 1 (every release before task-owned configuration) had one config shape for
every task: ``[model]`` and ``[data]`` held SensorLM's fields (the toy task read a few
of them), ``train.abort_drop_db`` was in dB, ``EvalDone`` carried ``psnr_db`` and
``extra``, and ``status.json`` had ``best_psnr``. Version 2 gives each task its own
section under its name (``[sensorlm.model]``, ``[toy]``), keeps ``data.path`` as the
one shared data source, and names the primary metric wherever a best value is kept.

The old names have to appear here to be migrated, which is why this module (with the
task registry and the SensorLM package) is allowed to name them by the source-scan
test. Each function is idempotent: a v2 input comes back as it went in.
"""

from __future__ import annotations

from typing import Any

#: Version of the config layout written as ``version`` in config.toml and checkpoints.
CONFIG_VERSION = 2

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


def config(data: Any) -> Any:
    """A v2 config dict from a v1 one (anything else comes back unchanged; the validator judges it)."""
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
    out["version"] = CONFIG_VERSION
    return out


def event(record: dict) -> dict:
    """A schema-2 event record from a schema-1 one (idempotent; other types pass through)."""
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
        if is_v1_config(record.get("config")):  # a run of the previous release: v1 config, no capabilities
            out["config"] = config(record["config"])
            if not record.get("capabilities"):
                out["capabilities"] = _builtin_capabilities(record.get("task") or "")
        return out
    return record


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
