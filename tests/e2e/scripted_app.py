"""The dashboard over the scripted demo run (no engine, no torch): what the tmux tests drive when they test what a
real terminal does to keys and layout, not the engine. ``python -m tests.e2e.scripted_app``."""

from __future__ import annotations

from tui.dashboard.app import DashboardApp
from tui.dashboard.scripted import ScriptedSession, demo_memory, demo_run


def main() -> int:
    """Run the dashboard until it is quit; its exit code."""
    session = ScriptedSession(history=demo_run(300), memory=demo_memory, detachable=True, run_dir="runs/demo-run")
    app = DashboardApp(lambda: session)
    app.run()
    return app.return_code or 0


if __name__ == "__main__":
    raise SystemExit(main())
