"""`sensorlm-tui attach [RUN] [--read-only] [--compare OTHER]`: open the dashboard on a run started anywhere.

RUN is a run directory, or a bare name under ./runs; without one, the newest
live run under ./runs. The session is an ``engine.run.control.client.RunClient`` on that
directory: the history is rebuilt from events.jsonl, then the log is
followed live, and controls go over the run's control socket — so any
number of viewers, in any terminals (SSH sessions, tmux panes), can watch
the same run at once. ``--read-only`` disables every control key (each says
why). Quitting offers detach / abort gracefully / cancel; a hang-up of the
viewer's terminal detaches; the engine trains on either way. A run whose
engine is gone (crashed, aborted) can be resumed from the viewer
(tui/dashboard/attach_app.py). ``--compare OTHER`` overlays another run's curves on
every chart, aligned by step.

Errors (no such run, no live run, no terminal, bad --theme/--refresh) are one
line and exit 2, listing the runs that do exist.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

from engine.core.exit_codes import ExitCode
from engine.core.invocation import command
from tui.model.run_index import DEFAULT_ROOT, RunLookupError, resolve


def _error(text: str) -> int:
    sys.stderr.write(f"sensorlm-tui: error: {text}\n")
    return ExitCode.BAD_INPUT


def _has_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def main(args: argparse.Namespace, root: Path = DEFAULT_ROOT) -> int:
    """Resolve the run, open the dashboard on it, return the exit code (2 for bad input)."""
    try:
        run_dir = resolve(args.run, root).absolute()
    except RunLookupError as exc:
        return _error(str(exc))
    compare = None
    if getattr(args, "compare", None):
        try:
            compare = resolve(args.compare, root).absolute()
        except RunLookupError as exc:
            return _error(f"--compare: {exc}")
        if compare == run_dir:
            return _error(f"--compare {args.compare}: that is the run being attached; name another run")
    if not _has_terminal():
        # A Textual app without a TTY busy-spins its input thread (research); say what works instead.
        return _error(f"attach {args.run or run_dir}: needs a terminal (stdin and stdout are not a TTY); "
                      f"`{command('runs', run_dir.parent)}` lists runs, {run_dir / 'events.jsonl'} has every event")
    return open_dashboard(run_dir, read_only=args.read_only, theme=args.theme, refresh=args.refresh, ansi=args.ansi,
                          compare=compare)


def open_dashboard(run_dir: Path, *, read_only: bool = False, theme: str | None = None,
                   refresh: float | None = None, ansi: bool = False, compare: Path | None = None) -> int:
    """Run the attach dashboard on ``run_dir`` until the user quits; prints the summary line after."""
    from engine.run.control.client import RunClient
    from tui.commands.run_dashboard import run_dashboard
    from tui.dashboard.attach_app import AttachApp

    return run_dashboard(lambda: RunClient(run_dir, read_only=read_only), theme=theme, refresh=refresh,
                         read_only=read_only, ansi=ansi,
                         app_class=partial(AttachApp, run_dir=run_dir, compare=str(compare) if compare else None))
