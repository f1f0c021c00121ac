"""Builders of the corpus's integration section: a user's plain loop (tests/integrations/user_loop.py, through
the fork server's ``loop`` entry) on a run directory whose saved ``last.pt`` is damaged or that holds another
run, ``train --resume`` of such a run, and metrics no chart can show.

A refused run must leave its directory as it was (the corpus checks the tree): the saved state and the
directory's owner are read before anything is written. A metric case trains into a directory outside the
case's work area and expects exit 0 with the cockpit's one warning line on stdout.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from tests.hostile.builders import Invocation

#: config.toml of a plain-loop run, as engine.app.integrations.core writes it (trimmed).
LOOP_CONFIG = '[integration]\nframework = "loop"\ncommand = "cd /work && python train.py"\n\n[train]\ntotal_steps = 4\n'


class Unpickled:
    """A pickle payload that would print if anything ever unpickled it (torch.load with weights_only refuses)."""

    def __reduce__(self):
        return (print, ("unpickled: the loop ran code from a checkpoint",))


def _run(area: Path, config: str | None = LOOP_CONFIG, log: bool = True) -> Path:
    run = area / "run"
    (run / "checkpoints").mkdir(parents=True)
    if config is not None:
        (run / "config.toml").write_text(config)
    if log:
        (run / "events.jsonl").write_text('{"type": "schema", "t": 1.0, "version": 2}\n')
    return run


def _state(width: int = 16) -> dict:
    from tests.integrations.user_loop import build

    model, optimizer = build(width)
    return {"step": 2, "model": model.state_dict(), "optimizer": optimizer.state_dict()}


def _write(path: Path, how: str) -> None:
    import torch

    if how == "fifo":
        os.mkfifo(path)
    elif how == "dev_zero":
        path.symlink_to("/dev/zero")
    elif how == "truncated":
        torch.save(_state(), path)
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif how == "code":
        torch.save({"step": 2, "model": Unpickled()}, path)
    elif how == "not_a_dict":
        torch.save([1, 2, 3], path)
    elif how == "other_shape":
        torch.save(_state(width=8), path)
    else:
        raise ValueError(how)


def _saved(*damage: str) -> Callable:
    """``last.pt`` (and ``last.prev.pt``, when a second is given) damaged the given ways."""
    def build(area: Path, bases) -> Invocation:
        run = _run(area)
        for name, how in zip(("last.pt", "last.prev.pt"), damage):
            _write(run / "checkpoints" / name, how)
        return Invocation([str(run), "--steps", "4"], entry="loop")

    return build


def _holds(config: str | None, log: bool = True, files: dict[str, str] | None = None) -> Callable:
    """A directory holding another run (an engine's config, another framework's, a log without a config) or a
    user's own files (``files``: name → text)."""
    def build(area: Path, bases) -> Invocation:
        run = _run(area, config, log)
        for name, text in (files or {}).items():
            (run / name).write_text(text)
        return Invocation([str(run), "--steps", "4"], entry="loop")

    return build


def _linked_log(area: Path, bases) -> Invocation:
    """A run of this loop whose events.jsonl is a link to a file elsewhere (planted: never written through)."""
    run = _run(area, log=False)
    (area / "elsewhere.txt").write_text("not the run's\n")
    (run / "events.jsonl").symlink_to(area / "elsewhere.txt")
    return Invocation([str(run), "--steps", "4"], entry="loop")


def _engine_resume(area: Path, bases) -> Invocation:
    return Invocation(["train", "--resume", str(_run(area)), "--headless"], entry="cli")


def _metric(expression: str, kind: str = "metric") -> Callable:
    """A loop handing over ``m=<expression>`` each step (``--metric``) or at each eval (``--eval``)."""
    def build(area: Path, bases) -> Invocation:
        written = area.parent / "written"  # outside the watched work area: a good run writes its directory
        return Invocation([str(written), "--steps", "4", f"--{kind}", f"m={expression}"], entry="loop")

    return build


INTEGRATION_BUILDERS: dict[str, Callable] = {
    "loop_last_fifo": _saved("fifo"),
    "loop_last_dev_zero": _saved("dev_zero"),
    "loop_last_truncated": _saved("truncated"),
    "loop_last_runs_code": _saved("code"),
    "loop_last_not_a_dict": _saved("not_a_dict"),
    "loop_last_other_shape": _saved("other_shape"),
    "loop_last_and_prev_damaged": _saved("truncated", "fifo"),
    "loop_on_an_engine_run": _holds('[task]\nname = "toy"\n\n[train]\nmax_steps = 4\n'),
    "loop_on_a_lightning_run": _holds(LOOP_CONFIG.replace('"loop"', '"lightning"')),
    "loop_on_a_log_without_config": _holds(None),
    "loop_on_a_users_status_json": _holds(None, log=False, files={"status.json": '{"mine": true}\n',
                                                                  "notes.txt": "my notes\n"}),
    "loop_events_a_link": _linked_log,
    "engine_resume_of_a_loop_run": _engine_resume,
    "metric_a_string": _metric("'abc'"),
    "metric_a_list": _metric("[1, 2]"),
    "metric_three_elements": _metric("torch.ones(3)"),
    "metric_10_pow_400": _metric("10**400"),
    "eval_a_string": _metric("'n/a'", "eval"),
}
