"""The dashboard over the scripted demo run (no engine, no torch): what the tmux tests drive when they test what a
real terminal does to keys and layout, not the engine. ``python -m tests.e2e.scripted_app [--autotune]``
(``--autotune``: with a search from step 300 that has measured four candidates)."""

from __future__ import annotations

import sys

from tui.dashboard.app import DashboardApp
from tui.dashboard.scripted import ScriptedSession, demo_autotune, demo_memory, demo_run


def main(argv: list[str]) -> int:
    """Run the dashboard until it is quit; its exit code."""
    run = demo_run(300)
    if "--autotune" in argv:
        run += demo_autotune(300, run[-1].t, measured=4)
    session = ScriptedSession(history=run, memory=demo_memory, detachable=True, run_dir="runs/demo-run")
    app = DashboardApp(lambda: session)
    app.run()
    return app.return_code or 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
