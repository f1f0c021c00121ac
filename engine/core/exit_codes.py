"""The engine's and the CLI's exit codes, in one place (scripts and schedulers branch on them), and a run's outcome."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ExitCode(IntEnum):
    """How a process ended; the values are the shell's exit status."""

    #: Finished, or stopped gracefully because a user asked (a graceful abort).
    FINISHED = 0
    #: A policy stopped the run (abort rule, NaN, overfit gate), it crashed, or its final checkpoint failed.
    POLICY = 1
    #: Bad input from a user or a file: a one-line error, nothing on disk damaged.
    BAD_INPUT = 2
    #: A collective waited past ``runtime.collective_timeout_s`` for a rank (stopped, hung): resumable.
    HUNG = 3
    #: Stopped by a signal (SIGTERM, Ctrl-C, a hang-up with on_hangup=stop): resumable.
    INTERRUPTED = 130


@dataclass
class Outcome:
    """How a run ended: status (finished / aborted / failed / interrupted), exit code, reason, checkpoint."""

    status: str
    exit_code: int
    reason: str = ""
    checkpoint: str | None = None
