"""Whose run a directory holds: where an integration may write, and which runs only the user's script resumes.

An integration run's config.toml carries an ``[integration]`` table (its
framework and the command that ran it; engine.app.integrations.core writes it).
That table is the mark both ways (after the directory's own trust,
engine.run.trust, which the engine's runs go through too):

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

from engine.core.fmt import printable
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
    """Why an integration of ``framework`` must not write into ``run_dir`` (one line), None when it may.

    First the run directory's trust (engine.run.trust): another uid's or a group-writable directory, a system
    one, a link or a FIFO under one of our names. Then whose run it holds: none (the fresh-run guard: nothing
    of a run's there, so no user's status.json is overwritten; the framework's own output beside it, such as a
    Trainer's output_dir, is left alone), or this framework's (rerunning the script continues it). An engine's
    run (its events would be appended to, `plot` would draw both runs as one curve) or another framework's is
    another run's."""
    from engine.run.trust import NotFresh, RunDirError, check_fresh, check_own_entries, check_trusted

    try:
        check_trusted(run_dir.root)
        check_own_entries(run_dir.root)
        if not run_dir.config.exists():
            check_fresh(run_dir.root)
            return None
    except NotFresh as exc:
        if not exc.run_files:
            return None  # only files that are not ours (the framework's output): never written by the cockpit
        return (f"{printable(run_dir.root)}: holds {', '.join(exc.run_files)} but no config.toml: not a run of this "
                "script; give your run another directory")
    except RunDirError as exc:
        return str(exc)
    except OSError as exc:
        return f"{printable(run_dir.root)}: cannot use the run directory ({exc.strerror})"
    return _whose(run_dir, framework)


def _whose(run_dir: RunDir, framework: str) -> str | None:
    """For a directory holding a run (its config.toml): None when it is this framework's, else why not."""
    from engine.core.config import ConfigError, read_toml

    try:
        data, _ = read_toml(run_dir.config)
    except ConfigError as exc:
        return f"{exc}: not a run of this script; give your run another directory"
    table = data.get("integration")
    if not isinstance(table, dict):
        task = data.get("task", {}).get("name") if isinstance(data.get("task"), dict) else None
        return (f"{printable(run_dir.root)}: holds an engine run"
                f"{f' of task {printable(task)!r}' if isinstance(task, str) else ''} (resume it with sensorlm-tui "
                "train --resume); give your run another directory")
    theirs = table.get("framework")
    if theirs != framework:
        return (f"{printable(run_dir.root)}: holds a {printable(theirs)[:40]!r} run, and this is a {framework} run: "
                "give your run another directory")
    return None
