"""The one function the CLI calls to show the dashboard: run it, restore the terminal, print the summary.

``tui/cli.py`` (bare ``sensorlm-tui``, ``train`` on a terminal, ``attach``)
builds a session factory and calls ``run_dashboard``; the factory runs on the
dashboard's worker thread, after the first frame. The summary line (how the
run ended, its checkpoint and resume command, or how to re-attach after a
detach) is printed after the app has given the terminal back, so it stays in
the scrollback.
"""

from __future__ import annotations

import sys
from typing import Callable

import themes
from engine.core.exit_codes import ExitCode
from engine.run.control.session import Session

#: Exit code for bad dashboard options (--theme, --refresh), as everywhere in the CLI.
#: Seconds to wait after the app exits for the worker to close the session before printing the summary
#: (the interpreter still joins the worker at exit; this only orders the summary after the close).
CLOSE_WAIT_S = 30.0


def run_dashboard(session_factory: Callable[[], Session], *, theme: str | None = None,
                  refresh: float | None = None, read_only: bool = False,
                  ansi: bool = False, in_process: bool = False, app_class=None) -> int:
    """Show the dashboard until the user quits or an abort finished; returns the exit code to use.

    ``refresh`` is plot redraws per second (0 < Hz ≤ 2, default 1). ``ansi``
    switches to the terminal's 16 colours. ``in_process`` (the Trainer runs in
    this process) rules out detaching.
    ``app_class`` builds the app instead of DashboardApp, with the same arguments (attach: AttachApp).
    """
    from tui.dashboard.app import DashboardApp, check_refresh  # textual only once we know a dashboard is wanted

    try:
        themes.resolve(theme)
        check_refresh(refresh)
    except ValueError as exc:
        sys.stderr.write(f"sensorlm-tui: error: {exc}\n")
        return ExitCode.BAD_INPUT
    app = (app_class or DashboardApp)(session_factory, theme=theme, refresh=refresh,
                                      read_only=read_only, ansi=ansi, in_process=in_process)
    app.run()
    app.wait_closed(CLOSE_WAIT_S)  # an in-process engine's close joins its trainer thread
    # return_code, not the result: Textual sets 1 when the app crashed, and exits 0 with stdin closed.
    code = app.return_code if app.return_code is not None else 0
    if app.summary:
        stream = sys.stderr if app.summary_is_error else sys.stdout
        try:
            stream.write(app.summary + "\n")
            stream.flush()
        except OSError:  # the terminal hung up (SIGHUP): nobody to tell; the run's log has it all
            pass
    return code
