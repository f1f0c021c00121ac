"""`sensorlm-tui train` on a terminal: the dashboard over an engine process (default) or an in-process Trainer.

The config was validated before this runs (bad flags never open the UI). The
session factory is called inside the dashboard's worker thread, so the first
frame appears before the engine process is up and before torch is imported.
"""

from __future__ import annotations

import argparse
import sys

#: Flags that belong to the viewer, not the engine (value-taking ones first).
VIEW_FLAGS_WITH_VALUE = ("--theme", "--refresh", "--run-dir")
VIEW_FLAGS = ("--ansi", "--in-process", "--headless")


def engine_argv(argv: list[str]) -> list[str]:
    """The train flags to forward to `python -m engine` (viewer flags and the subcommand removed)."""
    out: list[str] = []
    skip = False
    for i, item in enumerate(argv):
        if skip:
            skip = False
            continue
        if i == 0 and item == "train":
            continue
        name = item.split("=", 1)[0]
        if name in VIEW_FLAGS_WITH_VALUE:
            skip = "=" not in item
            continue
        if name in VIEW_FLAGS:
            continue
        out.append(item)
    return out


def make_session_factory(args: argparse.Namespace, argv: list[str], prepared):
    """A zero-argument callable building the Session the dashboard watches."""
    if args.in_process:
        def in_process():
            from engine.app.inprocess import InProcessSession

            return InProcessSession(prepared)
        return in_process

    forwarded = engine_argv(argv)
    if prepared.resume is None and "--name" not in forwarded:
        forwarded += ["--name", prepared.config.name]
    # No --threads here: the engine plans its threads itself and sees this dashboard on its control socket.
    return LaunchingSession(forwarded, prepared.run_dir.root)


class LaunchingSession:
    """The session factory of a dashboard over its own engine process: launches it, returns its client.

    ``start()`` spawns the engine before the dashboard imports Textual, so the engine's first second (Python,
    the config, the start of torch's import) overlaps the UI's and its first phases are there for the first
    frame. ``open(watch)`` is what the session worker calls (tui.dashboard.pump): it waits for the engine,
    the pid and every start-up phase reaching the dashboard, and a Ctrl-C there stops it
    (engine.run.control.launcher). ``stop_unopened`` ends an engine the dashboard never showed (it failed to
    start): nothing is left running unseen.
    """

    def __init__(self, argv: list[str], run_dir) -> None:
        self.argv, self.run_dir = argv, run_dir
        self.starting = None
        self.error: Exception | None = None
        self.opened = False

    def start(self) -> None:
        """Spawn the engine now (an error waits for ``open``: the dashboard shows it)."""
        from engine.run.control.launcher import LaunchError, spawn

        try:
            self.starting = spawn(self.argv, self.run_dir)
        except LaunchError as exc:
            self.error = exc

    def open(self, watch=None):
        from engine.run.control.launcher import spawn, wait_up

        self.opened = True
        if self.error is not None:
            raise self.error
        starting = self.starting or spawn(self.argv, self.run_dir)
        return wait_up(starting, watch=watch).client()

    def __call__(self):
        return self.open()

    def stop_unopened(self) -> str | None:
        """Stop an engine spawned for a dashboard that never opened its session; the line saying so, or None."""
        if self.starting is None or self.opened:
            return None
        return str(self.starting.stop())


def run_train_dashboard(args: argparse.Namespace, argv: list[str], prepared) -> int:
    """Open the dashboard on a new or resumed run; returns the process exit code."""
    factory = make_session_factory(args, argv, prepared)
    if isinstance(factory, LaunchingSession):
        factory.start()  # before Textual is imported: the engine starts while the dashboard does
    from tui.commands.run_dashboard import run_dashboard

    try:
        code = run_dashboard(factory, theme=args.theme, refresh=args.refresh, read_only=False, ansi=args.ansi,
                             in_process=bool(args.in_process))
    finally:
        stopped = factory.stop_unopened() if isinstance(factory, LaunchingSession) else None
        if stopped:
            sys.stderr.write(f"sensorlm-tui: {stopped}\n")
    sys.stdout.flush()
    return code
