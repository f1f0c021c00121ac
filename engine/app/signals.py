"""Signal policy of the engine process (installed only in the main thread of a headless engine).

- SIGTERM, first SIGINT: checkpoint at the next step boundary (or inside an
  evaluation, which is cut short), then exit 130 with a resumable state.
- second SIGINT: stop at once (KeyboardInterrupt), no checkpoint.
- SIGHUP (SSH dropped): by default keep training; stdout/stderr move to the
  run directory's engine.log so nothing is written to a dead terminal.
  ``policies.on_hangup = "stop"`` checkpoints and exits instead.
- SIGUSR1: checkpoint now (cluster schedulers send it before preemption).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from engine.core.exit_codes import ExitCode
from engine.core.safe_files import open_for_write
from engine.run.control.requests import Controls, checkpoint_now


def _redirect_output(log_path: Path) -> None:
    """Point fds 1 and 2 (and sys.stdout/err) at the log: the terminal is gone."""
    try:
        fd = open_for_write(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)  # never through a link
    except OSError:
        fd = os.open(os.devnull, os.O_WRONLY)
    for target in (1, 2):
        try:
            os.dup2(fd, target)
        except OSError:
            pass
    os.close(fd)


def install(controls: Controls, on_hangup: str, log_path: Path, note=print) -> None:
    """Install the handlers above; ``note`` logs a line (the console sink, usually)."""
    interrupts = {"count": 0}
    # Decided now, not in the handler: after a real hang-up the tty fds are dead and isatty() is False,
    # which made a hung-up engine think it never had a terminal and keep writing into the void.
    had_terminal = sys.stdout.isatty() or sys.stderr.isatty()

    def on_term(signum, frame):
        name = signal.Signals(signum).name
        if signum == signal.SIGINT:
            interrupts["count"] += 1
            if interrupts["count"] >= 2:
                controls.request_stop("second SIGINT: stopped at once, no checkpoint")
                raise KeyboardInterrupt
        controls.request_graceful(f"{name}: checkpointed and stopped", ExitCode.INTERRUPTED)

    def on_hup(signum, frame):
        if not had_terminal and on_hangup == "continue":
            note("SIGHUP: no terminal attached; training goes on")
            return
        _redirect_output(log_path)
        if on_hangup == "stop":
            note("SIGHUP: terminal gone; checkpointing and stopping (--on-hangup stop)")
            controls.request_graceful("SIGHUP: checkpointed and stopped (--on-hangup stop)", ExitCode.INTERRUPTED)
        else:
            note(f"SIGHUP: terminal gone; training goes on, output now in {log_path}")

    def on_usr1(signum, frame):
        controls.submit(checkpoint_now())

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, on_hup)
    signal.signal(signal.SIGUSR1, on_usr1)
