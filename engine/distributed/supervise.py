"""``python -m engine.distributed.supervise RUN_DIR [torchrun flags] -- [engine flags]``: run torchrun, report a dead rank.

torchrun's agent runs in this process (``torch.distributed.run.run``), so its
``ChildFailedError`` arrives as an object: which rank failed first and with
what exit code. When a rank dies the agent stops the others (SIGTERM, then
SIGKILL after 30 s); rank 0 notices its peer is gone in its next collective
and records a crash. Only this process knows the root cause, so once every
rank has exited it appends it to the run's events (a ``Warning`` naming the
rank and a final ``RunFinished`` with the resume command) and to status.json
(``failed_rank``, ``exit_code``, ``reason``).

Exit code: 0 when every rank finished; rank 0's own code for a clean policy
or usage exit (1, 2); 1 when a rank died.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path


def describe(rank: int, exitcode: int) -> str:
    """'rank 1 exited with code -9 (SIGKILL)': a negative code is the signal that killed it."""
    if exitcode < 0:
        try:
            return f"rank {rank} exited with code {exitcode} ({signal.Signals(-exitcode).name})"
        except ValueError:
            pass
    return f"rank {rank} exited with code {exitcode}"


def record_failure(run_dir: Path, rank: int, exitcode: int, launch: str = "") -> str:
    """Append the dead rank to the run's events and status; the reason line. ``launch`` ends the resume command."""
    from engine import events as ev
    from engine.rundir import RunDir, atomic_write_text, resume_command

    rd = RunDir(run_dir)
    reason = f"{describe(rank, exitcode)}; the job stopped"
    resume = resume_command(rd) + launch
    status = rd.read_status() or {}
    step = status.get("step", 0)
    if rd.events.exists():
        with open(rd.events, "a") as handle:
            for event in (ev.Warning(text=reason, step=step),
                          ev.RunFinished(status="failed", steps=step, reason=reason, resume_command=resume,
                                         checkpoint=status.get("last_checkpoint"), exit_code=1)):
                handle.write(ev.to_json(event) + "\n")
    if rd.root.is_dir():
        status.update(state="failed", exit_code=1, reason=reason, failed_rank=rank, failed_exit_code=exitcode,
                      resume_command=resume, heartbeat=time.time())
        atomic_write_text(rd.status, json.dumps(status))
    return reason


def main(argv: list[str]) -> int:
    """Run torchrun with ``argv`` (see the module docstring); the job's exit code."""
    run_dir, rest = Path(argv[0]), argv[1:]
    split = rest.index("--")
    torchrun, engine = rest[:split], rest[split + 1:]
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    try:
        run(parse_args([*torchrun, "-m", "engine.distributed.worker", *engine]))
        return 0
    except ChildFailedError as failed:
        rank, failure = failed.get_first_failure()
        if rank == 0 and failure.exitcode in (1, 2, 130):
            return failure.exitcode  # rank 0 stopped first (bad input, a policy stop): its own lines said why
        nproc = next((a.split("=", 1)[1] for a in torchrun if a.startswith("--nproc-per-node=")), "1")
        launch = f" --nproc-per-node {nproc}" if nproc != "1" else ""
        reason = record_failure(run_dir, rank, failure.exitcode, launch)
        sys.stderr.write(f"sensorlm-tui: {reason}; continue with: sensorlm-tui train --resume {run_dir}{launch}\n")
        return 1


if __name__ == "__main__":
    os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")  # see engine.distributed.launch.environment
    sys.exit(main(sys.argv[1:]))
