"""Whose run a directory holds: where an integration may write, and which runs only the user's script resumes.

An integration run's config.toml carries an ``[integration]`` table (its
framework and the command that ran it; engine.app.integrations.core writes it).
That table is the mark both ways:

- an integration opened on a directory holding any other run (an engine's, or
  another framework's) is refused with one line, before a byte is written:
  its events would land in that run's log and `plot` would draw both as one
  curve. Rerunning the same script on its own directory continues it;
- ``sensorlm-tui train --resume`` of an integration run is refused with one
  line naming the user's command (engine.app.prepare): the engine cannot
  rebuild someone else's script, and its config is not an engine config.

Torch-free.
"""

from __future__ import annotations

from engine.run.rundir import RunDir


def integration_of(run_dir: RunDir) -> dict | None:
    """The ``[integration]`` table of a run directory's config.toml (framework, command): the run of a script of
    the user's, which only that script can resume; None for an engine run or no readable config. Torch-free."""
    from engine.core.config import ConfigError, read_toml

    try:
        data, _ = read_toml(run_dir.config)
    except ConfigError:
        return None
    table = data.get("integration")
    return table if isinstance(table, dict) else None


def foreign(run_dir: RunDir, framework: str) -> str | None:
    """Why an integration of ``framework`` must not write into ``run_dir`` (one line), None when it may: the
    directory is new, or holds this framework's own run (rerunning the script continues it). An engine's run
    (its events would be appended to, `plot` would draw both runs as one curve), another framework's, or a log
    with no config.toml beside it is another run's."""
    if not run_dir.config.exists():
        if run_dir.events.exists():
            return (f"{run_dir.root}: holds a run log (events.jsonl) but no config.toml: not a run of this script; "
                    "give your run another directory")
        return None
    from engine.core.config import ConfigError, read_toml

    try:
        data, _ = read_toml(run_dir.config)
    except ConfigError as exc:
        return f"{exc}: not a run of this script; give your run another directory"
    table = data.get("integration")
    if not isinstance(table, dict):
        task = data.get("task", {}).get("name") if isinstance(data.get("task"), dict) else None
        return (f"{run_dir.root}: holds an engine run{f' of task {task!r}' if isinstance(task, str) else ''} "
                "(resume it with sensorlm-tui train --resume); give your run another directory")
    theirs = table.get("framework")
    if theirs != framework:
        return (f"{run_dir.root}: holds a {str(theirs)[:40]!r} run, and this is a {framework} run: give your run "
                "another directory")
    return None
