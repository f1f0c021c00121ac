"""Builders of the hostile cases about the run directory itself: whose it is, where it is, what it holds, what its
run is called, and whose checkpoints it holds (sections ``rundir``, ``names`` and ``provenance`` of cases.toml).

Each makes its case in ``area`` and returns the Invocation that meets it, as tests/hostile/builders.py does. A
resumed case starts from the corpus's valid toy checkpoint (tests/hostile/checkpoint/valid.safetensors) and its
config, rewritten in the current layout where a run id must be in both.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Callable

from tests.hostile.builders import CORPUS, FAST, Bases, Invocation

#: The uid a directory "prepared by another user" belongs to (root only: the runner skips such cases otherwise).
OTHER_UID = 65534
THIS_RUN, OTHER_RUN = "2" * 16, "1" * 16


def _fresh(area: Path, run: Path, *flags: str) -> Invocation:
    return Invocation(["--task", "toy", *FAST, "--run-dir", str(run), *flags])


def _dir(area: Path, mode: int = 0o755, files: dict[str, str] | None = None, owner: int | None = None) -> Path:
    run = area / "run"
    run.mkdir()
    for name, text in (files or {}).items():
        (run / name).write_text(text)
    run.chmod(mode)
    if owner is not None:
        os.chown(run, owner, owner)
    return run


def _linked(area: Path, names: tuple[str, ...]) -> Invocation:
    """Each of ``names`` a link to a file or directory outside the run (the runner checks they stay untouched)."""
    run = _dir(area)
    outside = area / "outside"
    outside.mkdir()
    for name in names:
        target = outside / name
        if name in ("checkpoints", "task", "exports", "ranks", "steps"):
            target.mkdir()
        else:
            target.write_text(f"not the engine's {name}\n")
        (run / name).symlink_to(target)
    return _fresh(area, run)


def _config(task: str = "toy", run_id: str = THIS_RUN) -> str:
    """A resolved config.toml in the current layout: the corpus's toy config, or a default one of ``task``."""
    from engine.core import config as cfg

    config = cfg.load_resolved(CORPUS / "checkpoint" / "config.toml") if task == "toy" else cfg.load(None, task=task)
    return cfg.dump_toml(config.model_copy(update={"run_id": run_id}))


def _checkpoint(path: Path, run_id: str | None) -> None:
    """The corpus's valid toy checkpoint; with ``run_id``, its config rewritten in the current layout carrying that
    id, and the metadata's checksum recomputed (what a checkpoint of that run holds)."""
    if run_id is None:
        shutil.copy(CORPUS / "checkpoint" / "valid.safetensors", path)
        return
    from safetensors import safe_open
    from safetensors.torch import save_file

    from engine.core import config as cfg

    with safe_open(str(CORPUS / "checkpoint" / "valid.safetensors"), framework="pt") as handle:
        header = dict(handle.metadata())
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    meta = json.loads(header["meta"])
    meta["config"] = {**cfg.validate(meta["config"], "corpus").model_dump(mode="json"), "run_id": run_id}
    header["meta"] = json.dumps(meta, separators=(",", ":"))
    header["meta_sha256"] = hashlib.sha256(header["meta"].encode()).hexdigest()
    save_file(tensors, str(path), metadata=header)


def _resumed(area: Path, config: str | None = None, checkpoint_run: str | None = THIS_RUN, *flags: str,
             edit: Callable[[Path], None] | None = None) -> Invocation:
    run = area / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.toml").write_text(_config() if config is None else config)
    _checkpoint(run / "checkpoints" / "last.safetensors", checkpoint_run)
    if edit is not None:
        edit(run)
    return Invocation(["--resume", str(run), *flags])


def _link_in(name: str, target: str = "outside") -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        outside = run.parent / target
        outside.write_text("not the engine's\n")
        (run / name).unlink(missing_ok=True)
        (run / name).symlink_to(outside)
    return edit


def _named(name: str, where: str = "ok") -> Callable[[Path, Bases], Invocation]:
    return lambda area, bases: Invocation(["--task", "toy", *FAST, "--name", name, "--run-dir", str(area / where)])


NOT_UTF8 = os.fsdecode(b"run-\xff")  # what Python makes of an argument byte that is not UTF-8
ALL_OURS = ("engine.lock", "engine.log", "startup.jsonl", "checkpoints", "config.toml", "events.jsonl",
            "status.json", "control.sock", "task", "exports")

BUILDERS: dict[str, Callable[[Path, Bases], Invocation]] = {
    # rundir: whose directory, where, what it holds
    "dir_of_another_uid": lambda a, b: _fresh(a, _dir(a, owner=OTHER_UID)),
    "dir_group_writable": lambda a, b: _fresh(a, _dir(a, 0o770)),
    "dir_world_writable": lambda a, b: _fresh(a, _dir(a, 0o777)),
    "dir_root": lambda a, b: _fresh(a, Path("/")),
    "dir_etc": lambda a, b: _fresh(a, Path("/etc")),
    "dir_home": lambda a, b: _fresh(a, Path.home()),
    "dir_users_files": lambda a, b: _fresh(a, _dir(a, files={"status.json": '{"mine": 1}', "engine.log": "my log\n",
                                                             "notes.txt": "my notes\n"})),
    "dir_log_alone": lambda a, b: _fresh(a, _dir(a, files={"engine.log": "my log\n"})),
    "dir_lock_link": lambda a, b: _linked(a, ("engine.lock",)),
    "dir_checkpoints_link": lambda a, b: _linked(a, ("checkpoints",)),
    "dir_every_name_a_link": lambda a, b: _linked(a, ALL_OURS),
    "dir_empty_config": lambda a, b: _fresh(a, _dir(a, files={"config.toml": ""})),
    "resume_of_another_uid": lambda a, b: _resumed(a, edit=lambda run: os.chown(run, OTHER_UID, OTHER_UID)),
    "resume_group_writable": lambda a, b: _resumed(a, edit=lambda run: run.chmod(0o770)),
    "resume_empty_config": lambda a, b: _resumed(a, ""),
    "resume_events_link": lambda a, b: _resumed(a, edit=_link_in("events.jsonl")),
    "resume_lock_link": lambda a, b: _resumed(a, edit=_link_in("engine.lock")),
    "resume_socket_link": lambda a, b: _resumed(a, edit=_link_in("control.sock")),
    # names
    "name_not_utf8": _named(NOT_UTF8),
    "dir_name_not_utf8": lambda a, b: _fresh(a, a / NOT_UTF8),
    "path_not_utf8": lambda a, b: _fresh(a, a / NOT_UTF8 / "run", "--name", "ok"),
    "name_newline": _named("a\nb"),
    "name_escape_sequence": _named("\x1b[31mred"),
    "name_c1_control": _named("\x9b31mred"),
    "name_bidi_override": _named("evil\u202etxt.sh"),
    # provenance
    "ckpt_another_run": lambda a, b: _resumed(a, checkpoint_run=OTHER_RUN),
    "ckpt_without_id_in_a_run_with_one": lambda a, b: _resumed(a, checkpoint_run=None),
    "ckpt_another_task": lambda a, b: _resumed(a, _config("sensorlm", ""), None),
    "task_flag_on_resume": lambda a, b: _resumed(a, None, THIS_RUN, "--task", "sensorlm"),
    "shape_flag_on_resume": lambda a, b: _resumed(a, None, THIS_RUN, "--set", "toy.dim=16"),  # it was trained at 8
}
