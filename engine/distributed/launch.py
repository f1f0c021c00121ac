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
import math
import os
import subprocess
import sys
from pathlib import Path

#: The distributed flags: dest → how they are passed on to torchrun.
TORCHRUN_FLAGS = ("nproc_per_node", "nnodes", "node_rank", "rdzv_endpoint", "rdzv_timeout", "max_restarts")
#: Seconds to resolve the rendezvous host and for the nodes to join (``--rdzv-timeout``). torchrun's own
#: defaults (a 60 s store read, tried twice; a 600 s join) let an unresolvable host run 128 s into a traceback.
RDZV_TIMEOUT_S = 30.0


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
    timeout = rdzv_timeout(args)
    if not 0 < timeout <= 86_400:
        return f"--rdzv-timeout={timeout:g}: must be > 0 and <= 86400 seconds"
    return check_endpoint(args.rdzv_endpoint, timeout) if args.rdzv_endpoint else None


def rdzv_timeout(args: argparse.Namespace) -> float:
    """The job's rendezvous timeout in seconds (``--rdzv-timeout``, default RDZV_TIMEOUT_S)."""
    value = getattr(args, "rdzv_timeout", None)
    return RDZV_TIMEOUT_S if value is None else value


def split_endpoint(endpoint: str) -> tuple[str, int] | str:
    """(host, port) of ``HOST:PORT`` (``[v6]:PORT`` too), or the one-line reason it is not one."""
    host, sep, port = endpoint.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit():
        return f"--rdzv-endpoint={endpoint!r}: expected HOST:PORT"
    if not 1 <= int(port) <= 65535:
        return f"--rdzv-endpoint={endpoint!r}: port {int(port)} is out of range; allowed: 1..65535"
    return host, int(port)


def check_endpoint(endpoint: str, timeout: float) -> str | None:
    """None when ``endpoint`` parses and its host resolves within ``timeout`` s; else the one-line reason.

    Resolved here, before any process starts: torchrun met an unknown host only inside its store's
    connect, and reported it as a traceback. ``getaddrinfo`` has no timeout of its own (a DNS server
    that never answers), so it runs in a daemon thread that is abandoned after ``timeout``.
    """
    import socket
    import threading

    parsed = split_endpoint(endpoint)
    if isinstance(parsed, str):
        return parsed
    host, port = parsed
    answer: list = []

    def resolve() -> None:
        try:
            answer.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except (OSError, UnicodeError) as exc:
            answer.append(exc)

    worker = threading.Thread(target=resolve, name="rdzv-resolve", daemon=True)
    worker.start()
    worker.join(timeout)
    if not answer:
        return f"--rdzv-endpoint={endpoint!r}: host {host!r} did not resolve within --rdzv-timeout {timeout:g} s"
    if isinstance(answer[0], BaseException):
        why = getattr(answer[0], "strerror", None) or str(answer[0])
        return f"--rdzv-endpoint={endpoint!r}: cannot resolve host {host!r} ({why})"
    return None


def engine_argv(argv: list[str], run_dir: str | None) -> list[str]:
    """``argv`` without torchrun's flags (the workers must not launch again), with ``--run-dir`` fixed."""
    out, skip = [], False
    names = {"--" + d.replace("_", "-") for d in TORCHRUN_FLAGS}  # --strategy is the engine's (runtime.strategy)
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
        # c10d ranks the nodes as they join: torchrun ignores --node-rank for it (and warned on stderr that it
        # did), so --node-rank is checked above and not passed on.
        timeout = max(1, math.ceil(rdzv_timeout(args)))  # torchrun reads whole seconds
        out += [f"--rdzv-endpoint={args.rdzv_endpoint}", f"--rdzv-conf=join_timeout={timeout},read_timeout={timeout}"]
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


def run(args: argparse.Namespace, argv: list[str], preflight=None) -> int:
    """Launch the job and wait for it; its exit code (2 with one line for bad distributed flags).

    ``preflight(args)`` (engine.app.job_plan.refusal) judges the ranks against this machine before any
    process starts: the one-line reason it cannot hold them, or None.
    """
    error = check(args) or (preflight(args) if preflight is not None else None)
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
