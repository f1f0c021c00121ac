"""``train --nproc-per-node N``: run the engine under torchrun, in a session of its own. Torch-free.

The process tree is ``train`` (foreground, may die with the terminal) →
``python -m engine.app.supervisor`` (``setsid``: a hang-up of the
terminal never reaches it, and torchrun's default of forwarding SIGHUP to its
workers never fires) → torchrun's agent, in the supervisor's process → one
``python -m engine.app.rank_worker`` per rank. One process (no
``--nproc-per-node``) is the default and runs exactly as before.

The run directory is fixed here, before any rank starts, so every rank reads
the same one (a default timestamp name computed per rank could differ by a
second).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

#: The distributed flags: dest → how they are passed on to torchrun.
TORCHRUN_FLAGS = ("nproc_per_node", "nnodes", "node_rank", "rdzv_endpoint", "max_restarts")


def wanted(args: argparse.Namespace) -> bool:
    """True when the flags ask for a torchrun launch and this process is not already a rank of one."""
    return getattr(args, "nproc_per_node", None) is not None and "TORCHELASTIC_RUN_ID" not in os.environ


def check(args: argparse.Namespace) -> str | None:
    """The one-line error for distributed flags that cannot work, or None."""
    for dest, low in (("nproc_per_node", 1), ("nnodes", 1), ("node_rank", 0), ("max_restarts", 0)):
        value = getattr(args, dest, None)
        if value is not None and value < low:
            return f"--{dest.replace('_', '-')}={value}: must be >= {low}"
    nnodes = args.nnodes or 1
    if args.node_rank is not None and args.node_rank >= nnodes:
        return f"--node-rank={args.node_rank}: must be < --nnodes ({nnodes})"
    if nnodes > 1 and not args.rdzv_endpoint:
        return f"--nnodes={nnodes}: needs --rdzv-endpoint HOST:PORT (where node 0's rendezvous listens)"
    if args.rdzv_endpoint and ":" not in args.rdzv_endpoint:
        return f"--rdzv-endpoint={args.rdzv_endpoint!r}: expected HOST:PORT"
    return None


def engine_argv(argv: list[str], run_dir: str | None) -> list[str]:
    """``argv`` without torchrun's flags (the workers must not launch again), with ``--run-dir`` fixed."""
    out, skip = [], False
    names = {"--" + d.replace("_", "-") for d in TORCHRUN_FLAGS}  # --strategy is the engine's (train.strategy)
    for item in argv:
        if skip:
            skip = False
            continue
        flag = item.split("=", 1)[0]
        if flag in names:
            skip = "=" not in item
            continue
        out.append(item)
    if run_dir and "--resume" not in out and "--run-dir" not in out:
        out += ["--run-dir", run_dir]
    return out


def torchrun_argv(args: argparse.Namespace, run_dir: str) -> list[str]:
    """torchrun's own flags: c10d rendezvous, per-rank logs under the run directory, restarts."""
    nnodes = args.nnodes or 1
    out = [f"--nproc-per-node={args.nproc_per_node}", f"--nnodes={nnodes}",
           f"--max-restarts={args.max_restarts or 0}", "--rdzv-backend=c10d",
           f"--log-dir={Path(run_dir) / 'ranks'}", "--tee=3", "--local-ranks-filter=0"]
    if nnodes == 1 and not args.rdzv_endpoint:
        out.append("--standalone")
    else:
        out += [f"--rdzv-endpoint={args.rdzv_endpoint}", f"--node-rank={args.node_rank or 0}"]
    return out


def supervisor_command(args: argparse.Namespace, argv: list[str]) -> list[str]:
    """``python -m engine.app.supervisor RUN_DIR [torchrun flags] -- [engine flags]``."""
    from engine.run.rundir import default_name

    run_dir = args.resume or args.run_dir or str(Path("runs") / (args.name or default_name()))
    return [sys.executable, "-m", "engine.app.supervisor", run_dir, *torchrun_argv(args, run_dir), "--",
            *engine_argv(argv, run_dir)]


def environment() -> dict:
    """The supervisor's environment: this engine importable, unbuffered logs, and no shared rendezvous store.

    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: with the agent's store shared, gloo restarts (--max-restarts)
    reconnected to the dead ranks' stale addresses and failed (pytorch #135712; measured 2/2 here).
    """
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parent.parent.parent)
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")  # N ranks on one box: torch's default (every core each) oversubscribes
    return env


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Launch the job and wait for it; its exit code (2 with one line for bad distributed flags)."""
    error = check(args)
    if error:
        sys.stderr.write(f"sensorlm-tui: error: {error}\n")
        return 2
    process = subprocess.Popen(supervisor_command(args, argv), start_new_session=True, env=environment(),
                               stdin=subprocess.DEVNULL)
    try:
        return process.wait()
    except KeyboardInterrupt:  # the job runs in its own session: pass the Ctrl-C on (every rank stops gracefully)
        import signal

        os.killpg(process.pid, signal.SIGINT)
        return process.wait()
