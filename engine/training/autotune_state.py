"""What a live search changes in the run, and what it leaves behind when the run stops during it.

A candidate is applied whole or not at all (``apply_all``): a change that is
refused part-way (a task refusing a value it declared, a bound of this
machine) takes back the ones already made, so the run never trains a setting
no one chose. Before, the candidate's first changes stayed in force.

What a run records while a search runs. The settings in force are a
candidate's, which no one chose: a checkpoint taken then (the periodic one, a
crash's) recorded them, a kill -9 and ``--resume`` trained on with that
candidate and never searched again. A checkpoint now records the settings
from before the search (``recorded``) and a mark that one was running
(``mark``); a resume starts from those settings and searches again from the
start (``resumed``) rather than continue the old one: a rate measured by
another process (its warm caches, its worker processes, the box's load then)
does not compare with this one's, and a search is a few windows long. A run
that ends during a search (an abort, the last step) restores the settings from
before it, as a cancel does (``Autotuner.close``), so its last checkpoint and
config.toml agree. A search's result is written to config.toml and to a
checkpoint before ``AutotuneChose`` reports it: a kill right after the report
resumes with the result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from engine.budget.settings import written
from engine.run import events as ev
from engine.training.autotune_search import differs

if TYPE_CHECKING:
    from engine.core.config import RunConfig
    from engine.training.live_settings import LiveSettings

#: The checkpoint metadata key of a search in progress: ``{"since": step, "reason": why it started}``.
MARK = "autotune"


def apply_all(settings: LiveSettings, change: Callable[[str, Any], tuple[Any, str]], now: dict, target: dict,
              order: list[str], emit: Callable[[ev.Event], None], step: int, reason: str) -> None:
    """Change what differs between ``now`` and ``target``, in ``order`` (a backend before its chunk size), each
    change a SettingChanged with ``reason``. All or none: ValueError when one is refused, the changes before it
    taken back first (each said)."""
    changes = differs(now, target)
    made: list[tuple[str, Any]] = []
    try:
        for name in sorted(changes, key=lambda n: order.index(n) if n in order else len(order)):
            _, error = settings.admit({name: changes[name]})  # the engine's door, as every change passes it
            if error:
                raise ValueError(error)
            old, _ = change(name, changes[name])
            made.append((name, old))
            emit(ev.SettingChanged(name=name, old=old, new=changes[name], reason=reason, step=step))
    except ValueError as exc:
        for name, old in reversed(made):
            undone, _ = change(name, old)
            emit(ev.SettingChanged(name=name, old=undone, new=old, reason=f"{reason} taken back ({exc})", step=step))
        raise


def recorded(settings: LiveSettings, start: dict | None) -> tuple[dict, RunConfig]:
    """(batch_size and grad_accum, the config) a checkpoint records: those in force, or during a search (``start``:
    the settings before it) those from before it."""
    if start is None:
        return settings.state_dict(), settings.config
    live = {"batch_size": settings.batch_size, "grad_accum": start.get("grad_accum", settings.grad_accum)}
    return live, written(settings.config, start, settings.table)  # values in force before: the door admitted them


def mark(since: int, reason: str) -> dict:
    """The checkpoint metadata of a search in progress."""
    return {MARK: {"since": since, "reason": reason}}


def resumed(meta: dict) -> str:
    """The reason a resumed run searches again ("" when its checkpoint was taken outside a search)."""
    found = meta.get(MARK)
    if not isinstance(found, dict) or not isinstance(found.get("since"), int):
        return ""
    return (f"resumed from a checkpoint taken during the search begun at step {found['since']}: the settings "
            "from before it restored, searched again from the start")


def write_config(write: Callable[[str], None] | None, config: RunConfig, emit: Callable[[ev.Event], None],
                 step: int) -> None:
    """config.toml records ``config`` (atomically: ``write`` is RunDir.write_config; None on a rank that does not
    own the run directory, or a run without one); a failure is a warning, the run goes on."""
    if write is None:
        return
    from engine.core.config import dump_toml

    try:
        write(dump_toml(config))
    except OSError as exc:
        emit(ev.Warning(text=f"autotune: config.toml not rewritten ({exc.strerror})", step=step))
