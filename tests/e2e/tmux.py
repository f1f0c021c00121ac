"""Drive the real app in a real terminal: a private tmux server per test, send-keys, capture-pane.

Each Tmux object uses its own server socket (``tmux -L <name>``) so tests
never touch anyone else's tmux sessions, and ``close`` kills only that
server. Killing a session closes its pty: the kernel hangs up the pane's
process group (SIGHUP), exactly what an SSH drop does to a viewer.

The tmux server gets an explicit environment without COLUMNS and LINES. pytest's capture plugin imports
``readline`` at start-up (``_pytest.capture._readline_workaround``), and GNU readline writes COLUMNS=80
LINES=24 into the C-level process environment: ``os.environ`` never shows them, but a child started with
the inherited environment (``env=None``) gets them, and so would every pane of the server. Textual (like
``shutil.get_terminal_size``) prefers those variables to the pty's real size, so every dashboard here
would draw at 80×24 whatever size the window has.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import PACE_S, ROOT, cli_env, pacing

#: Skip marker for machines without tmux.
needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Tmux:
    """One private tmux server; ``start`` runs a command in a new 120×40 session."""

    def __init__(self, cwd: Path) -> None:
        self.socket = f"sensorlm-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.cwd = Path(cwd)

    def _tmux(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        # os.environ, not the C-level environment readline changed; the pane's size comes from its pty alone
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=20,
                              check=check, env=env)

    def start(self, session: str, command: list[str], size: tuple[int, int] = (120, 40)) -> int:
        """Run ``command`` (then report its exit code and linger) in a new ``size`` (columns, rows) session;
        returns the pane's pid."""
        env = cli_env()
        env.update(LANG="C.UTF-8", LC_ALL="C.UTF-8", TERM="xterm-256color")
        env.pop("NO_COLOR", None)
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items() if k in (
            "PYTHONPATH", "LANG", "LC_ALL", "OMP_NUM_THREADS", "PATH", "HOME"))
        # exec keeps the pane's pid = the app's pid (so a test can tell the viewer is gone after a hang-up)
        # only when we do not need the exit code; here we want the code, so the shell stays and prints it.
        # No COLUMNS/LINES reach the pane (``_tmux`` and the module note say why), so the app draws at ``size``.
        line = f"export {exports}; cd {shlex.quote(str(self.cwd))}; {shlex.join(command)}; echo EXIT=$?; sleep 600"
        self._tmux("new-session", "-d", "-s", session, "-x", str(size[0]), "-y", str(size[1]), line)
        return int(self._tmux("display-message", "-p", "-t", session, "#{pane_pid}").stdout.strip())

    def screen(self, session: str, joined: bool = False) -> str:
        """The pane's text now ('' once the session is gone); ``joined``: lines the pane wrapped joined again."""
        result = self._tmux("capture-pane", "-p", *(["-J"] if joined else []), "-t", session, check=False)
        return result.stdout if result.returncode == 0 else ""

    def keys(self, session: str, *keys: str) -> None:
        """send-keys (tmux key names: q, Escape, Space, C-c …)."""
        self._tmux("send-keys", "-t", session, *keys)

    def kill(self, session: str) -> None:
        """Kill the session: its pty closes, the viewer gets SIGHUP (a real hang-up)."""
        self._tmux("kill-session", "-t", session, check=False)

    def wait_for(self, session: str, predicate, timeout: float = 60.0, what: str = "screen",
                 joined: bool = False) -> str:
        """Poll the pane until ``predicate(text)`` holds; returns the text, fails with the last screen."""
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen(session, joined)
            if predicate(text):
                return text
            time.sleep(0.2)
        pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}; screen:\n{text}")

    def close(self) -> None:
        """Kill this test's tmux server (and whatever still runs in it)."""
        self._tmux("kill-server", check=False)


def sensorlm(*args: str) -> list[str]:
    """The CLI as a user runs it, from this checkout's interpreter."""
    import sys

    return [sys.executable, "-m", "tui.cli", *args]


def paced(command: list[str], seconds: float = PACE_S) -> list[str]:
    """``command`` with its engine's first steps paced (tests.conftest.pacing): for a run the test only watches."""
    name, spec = pacing(seconds)
    return ["env", f"{name}={spec}", *command]


__all__ = ["Tmux", "needs_tmux", "paced", "sensorlm", "ROOT"]


def started_in(cwd: Path, *commands: str) -> list:
    """The processes whose command line holds one of ``commands`` and whose working directory is ``cwd``
    (the app starts engines and rank workers in sessions of their own: a test finds what it left by place)."""
    import psutil

    out = []
    for proc in psutil.process_iter(["cmdline"]):
        line = " ".join(proc.info["cmdline"] or [])
        if not any(command in line for command in commands):
            continue
        try:
            if Path(proc.cwd()) == cwd:
                out.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return out
