"""``python -m engine.app.supervisor RUN_DIR [torchrun flags] -- [engine flags]``: run torchrun, report a dead rank.

torchrun's agent runs in this process (``torch.distributed.run.run``), so its
``ChildFailedError`` arrives as an object: which rank failed first and with
what exit code. When a rank dies the agent stops the others (SIGTERM, then
SIGKILL after 30 s); rank 0 notices its peer is gone in its next collective
and records a crash. Only this process knows the root cause, so once every
rank has exited it appends it to the run's events (a ``Warning`` naming the
rank and a final ``RunFinished`` with the resume command) and to status.json
(``failed_rank``, ``exit_code``, ``reason``).

A rank that is alive but stuck (SIGSTOP'd, deadlocked) is found by the others:
their next collective fails after ``runtime.collective_timeout_s``, and rank 0
writes the hang to events and status.json (``hung``: collective, step, the rank
that did not arrive) and exits 3. torchrun's agent would then SIGTERM the stuck
rank, which cannot act on it while stopped, and wait 30 s before SIGKILL; so
``Reaper`` watches status.json and SIGKILLs this node's other workers as soon as
the hang is recorded. A rank other than 0 that times out (rank 0 is the stuck
one) exits 3 and is recorded here like a dead rank, its reason saying it waited.

Exit code: 0 when every rank finished; rank 0's own code for a clean policy,
usage or hang exit (1, 2, 3); 3 when another rank reported a hang; 1 when a rank died.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

from engine.core.exit_codes import ExitCode
from engine.core.safe_files import open_for_write


class Reaper:
    """A thread that SIGKILLs this node's workers other than rank 0 once status.json records a hang."""

    def __init__(self, run_dir: Path, every_s: float = 0.5) -> None:
        self.status, self.every_s = Path(run_dir) / "status.json", every_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hang-reaper", daemon=True)

    def start(self) -> "Reaper":
        """Start watching."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (the job is over)."""
        self._done.set()

    def _run(self) -> None:
        while not self._done.wait(self.every_s):
            try:
                if "hung" in json.loads(self.status.read_text()):
                    break
            except (OSError, ValueError):
                continue
        else:
            return
        for pid in _workers():
            try:
                os.kill(pid, signal.SIGKILL)  # works on a stopped process, unlike the agent's SIGTERM
            except OSError:
                pass


def _workers() -> list[int]:
    """Pids of this process's children that are torchrun workers of a rank other than 0 (their ``RANK``)."""
    import psutil

    out = []
    for child in psutil.Process().children():
        try:
            rank = child.environ().get("RANK")
        except psutil.Error:  # gone since, or not ours to read
            continue
        if rank is not None and rank != "0":
            out.append(child.pid)
    return out


def describe(rank: int, exitcode: int) -> str:
    """'rank 1 exited with code -9 (SIGKILL)': a negative code is the signal that killed it."""
    if exitcode == ExitCode.HUNG:
        return f"rank {rank} waited past the collective timeout for a stuck rank"
    if exitcode < 0:
        try:
            return f"rank {rank} exited with code {exitcode} ({signal.Signals(-exitcode).name})"
        except ValueError:
            pass
    return f"rank {rank} exited with code {exitcode}"


def record_failure(run_dir: Path, rank: int, exitcode: int, launch: str = "") -> str:
    """Append the dead rank to the run's events and status; the reason line. ``launch`` ends the resume command."""
    from engine.run import events as ev
    from engine.run.rundir import RunDir, atomic_write_text, resume_command

    rd = RunDir(run_dir)
    reason = f"{describe(rank, exitcode)}; the job stopped"
    code = int(ExitCode.HUNG if exitcode == ExitCode.HUNG else ExitCode.POLICY)
    resume = resume_command(rd) + launch
    status = rd.read_status() or {}
    step = status.get("step", 0)
    if rd.events.exists():
        with os.fdopen(open_for_write(rd.events, os.O_WRONLY | os.O_APPEND), "a") as handle:
            for event in (ev.Warning(text=reason, step=step),
                          ev.RunFinished(status="failed", steps=step, reason=reason, resume_command=resume,
                                         checkpoint=status.get("last_checkpoint"), exit_code=code)):
                handle.write(ev.to_json(event) + "\n")
    if rd.root.is_dir():
        status.update(state="failed", exit_code=code, reason=reason, failed_rank=rank, failed_exit_code=exitcode,
                      resume_command=resume, heartbeat=time.time())
        atomic_write_text(rd.status, json.dumps(status))
    return reason


def main(argv: list[str]) -> int:
    """Run torchrun with ``argv`` (see the module docstring); the job's exit code."""
    run_dir, rest = Path(argv[0]), argv[1:]
    split = rest.index("--")
    torchrun, engine = rest[:split], rest[split + 1:]
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError
    from torch.distributed.run import parse_args, run

    reaper = Reaper(run_dir).start()
    fresh = not run_dir.exists()
    try:
        run(parse_args([*torchrun, "-m", "engine.app.rank_worker", *engine]))
        return 0
    except RendezvousError as exc:  # no rank started: the nodes never met (--rdzv-timeout bounds the wait)
        if fresh:  # it holds only the empty log directories torchrun made for ranks that never ran
            shutil.rmtree(run_dir, ignore_errors=True)
        sys.stderr.write(f"sensorlm-tui: error: {rendezvous_failure(torchrun, exc)}\n")
        return ExitCode.BAD_INPUT
    except ChildFailedError as failed:
        rank, failure = failed.get_first_failure()
        if rank == 0 and failure.exitcode in (1, 2, 3, 130):
            return failure.exitcode  # rank 0 stopped first (bad input, a policy stop, a hang): its own lines said why
        hung = (_status(run_dir) or {}).get("hung")
        if hung:  # rank 0 recorded the hang; the first failure seen may be the stuck rank we killed after it
            sys.stderr.write(f"sensorlm-tui: {(_status(run_dir) or {}).get('reason', 'a collective hung')}; "
                             f"continue with: {(_status(run_dir) or {}).get('resume_command', '')}\n")
            return ExitCode.HUNG
        nproc = next((a.split("=", 1)[1] for a in torchrun if a.startswith("--nproc-per-node=")), "1")
        launch = f" --nproc-per-node {nproc}" if nproc != "1" else ""
        reason = record_failure(run_dir, rank, failure.exitcode, launch)
        from engine.run.rundir import RunDir, resume_command

        sys.stderr.write(f"sensorlm-tui: {reason}; continue with: {resume_command(RunDir(run_dir))}{launch}\n")
        return ExitCode.HUNG if failure.exitcode == ExitCode.HUNG else 1
    finally:
        reaper.stop()


def rendezvous_failure(torchrun: list[str], exc: BaseException) -> str:
    """One line for a rendezvous that failed: the endpoint, the timeout it had, and torchrun's reason."""
    flags = dict(a.split("=", 1) for a in torchrun if a.startswith("--") and "=" in a)
    conf = dict(kv.split("=", 1) for kv in flags.get("--rdzv-conf", "").split(",") if "=" in kv)
    cause = exc.__cause__ or exc.__context__
    why = str(cause or exc).strip().splitlines()
    reason = type(exc).__name__ + (f": {why[0][:160]}" if why else "")
    return (f"--rdzv-endpoint={flags.get('--rdzv-endpoint', '?')}: no rendezvous within --rdzv-timeout "
            f"{conf.get('join_timeout', '?')} s ({reason}); is node 0 started, and is its endpoint reachable "
            "from here?")


def _status(run_dir: Path) -> dict | None:
    """status.json as a dict (None when unreadable)."""
    try:
        return json.loads((Path(run_dir) / "status.json").read_text())
    except (OSError, ValueError):
        return None


if __name__ == "__main__":
    os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")  # see engine.distributed.launch.environment
    sys.exit(main(sys.argv[1:]))
