"""A preloaded engine that forks real engine processes on request (test helper; run as a script).

Why: a fresh ``python -m engine`` spends ~2.5 s importing torch and another
~1.5-2.5 s importing torch._dynamo (AdamW's constructor pulls it in) before
its first step; the fault-injection tests start ~80 engines. This server
imports all of that once, single-threaded (OMP_NUM_THREADS=1 keeps OpenMP
and OpenBLAS from starting pools, so fork is safe), and then forks one child
per request. Each child is a real process with its own pid, files and signal
dispositions, running the same entry point as ``python -m engine``
(``engine.app.main.main``); SIGKILL, SIGTERM, a hang-up of its terminal all hit
it exactly as they would a freshly started engine.

Protocol (JSON lines on stdin/stdout): ``{"op": "spawn", "argv": [...],
"env": {...}, "cwd": ..., "out": path, "err": path, "tty": path|null}`` →
``{"pid": N}``; ``{"op": "wait", "pid": N, "timeout": s}`` →
``{"status": exit code (negative = killed by that signal) | null}``. ``"entry"``: ``"cli"`` runs the
``sensorlm-tui`` console script instead, ``"loop"`` a user's plain loop with the cockpit
(tests/integrations/user_loop.py), ``"module"`` engine/__main__.py itself (its first instruction, and its
exit through ``exit_now`` with the atexit handlers a real process runs).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback


def _child(request: dict) -> None:
    """Become the engine process described by ``request``; never returns."""
    code = 1
    try:
        if request.get("tty"):
            # A new session whose controlling terminal is the pty: closing its master is a real hang-up.
            os.setsid()
            fd = os.open(request["tty"], os.O_RDWR)
            for target in (0, 1, 2):
                os.dup2(fd, target)
            os.close(fd)
        else:
            os.setpgid(0, 0)  # keep the test runner's Ctrl-C (process group) away from engines
            stdin = os.open(os.devnull, os.O_RDONLY)
            out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            err = os.open(request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(stdin, 0), os.dup2(out, 1), os.dup2(err, 2)
            for fd in (stdin, out, err):
                os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        sys.path[:0] = request.get("path") or []  # a plugin's site directory (its entry point is found there)
        if request.get("entry") == "module":  # `python -m engine ARGV`, its __main__ run as a fresh one would
            import runpy

            sys.argv = ["python -m engine", *request["argv"]]
            runpy.run_module("engine", run_name="__main__", alter_sys=True)  # ends in exit_now (atexit, os._exit)
        elif request.get("entry") == "cli":  # `sensorlm-tui ARGV`: the console script's own entry point
            from tui.cli import main as cli_main

            code = cli_main(request["argv"])
        elif request.get("entry") == "loop":  # a user's plain loop with the cockpit (tests/integrations/user_loop)
            from tests.integrations.user_loop import main as loop_main

            code = loop_main(request["argv"])
        else:
            from engine.app.main import main

            code = main(request["argv"], prog="python -m engine")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # what an uncaught exception would print in a fresh interpreter
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 1)


def serve() -> None:
    """Preload, say ready, then answer spawn/wait requests until stdin closes."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    import torch._dynamo  # noqa: F401  (what AdamW's constructor would import in each child)

    import engine.app.main  # noqa: F401
    import engine.checkpoint.format  # noqa: F401
    import engine.tasks.toy  # noqa: F401
    import engine.training.loop  # noqa: F401
    import sensorlm_tui.loop  # noqa: F401  (a user's plain loop, for the integration cases)
    import tui.cli  # noqa: F401  (the `sensorlm-tui` entry point, for cases that run a command)

    try:
        import engine.tasks.sensorlm  # noqa: F401  (CSV cases; optional while that task is being written)
    except Exception:
        pass
    del torch
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "spawn":
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                _child(request)
            reply = {"pid": pid}
        elif request["op"] == "wait":
            reply = {"status": _wait(request["pid"], request["timeout"])}
        else:
            reply = {"error": f"unknown op {request['op']!r}"}
        print(json.dumps(reply), flush=True)
    os._exit(0)  # skip interpreter teardown with torch loaded (seconds, under load); children are the tests' job


def _wait(pid: int, timeout: float) -> int | None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            return None
        time.sleep(0.01)


if __name__ == "__main__":
    serve()
