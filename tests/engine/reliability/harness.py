"""Helpers for the fault-injection tests: start engines, follow their output, inspect their checkpoints."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT, cli_env

#: Small, fast toy runs: one thread, a line per step, a 100k-parameter MLP whose checkpoint is ~1.2 MB.
TOY = ["--task", "toy", "--threads", "1", "--set", "train.print_every=1", "--set", "toy.dim=32",
       "--set", "toy.val_samples=8"]
FAULTS = "SENSORLM_TUI_FAULTS"
STEP_LINE = re.compile(r"^step\s+(\d+)/")


def engine_env(faults: str = "") -> dict:
    """Subprocess environment; ``faults`` goes to SENSORLM_TUI_FAULTS."""
    env = cli_env()
    env.pop(FAULTS, None)
    if faults:
        env[FAULTS] = faults
    return env


class ForkServer:
    """Client of forkserver.py: spawns real engine processes from one preloaded interpreter."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("forkserver.py"))], cwd=ROOT,
                                     env=engine_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     bufsize=1)
        ready = json.loads(self.proc.stdout.readline() or "{}")
        if "ready" not in ready:
            raise RuntimeError("fork server failed to start")

    def _ask(self, request: dict) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def spawn(self, argv: list[str], workdir: Path, faults: str = "", tty: str | None = None, entry: str = "engine",
              path: list[str] | None = None, cwd: Path | None = None, stdout: Path | None = None) -> "Engine":
        """Start ``python -m engine argv`` (forked, into ``engine.app.main.main``; ``entry="module"``: through
        engine/__main__.py itself; ``entry="cli"``: ``sensorlm-tui argv``; ``entry="loop"``: a user's plain loop,
        tests/integrations/user_loop.py; ``path`` put first on its sys.path); its stdout/stderr go to files in
        ``workdir`` (stdout to ``stdout`` when given: a FIFO there is a pipe the test reads), which is also its
        current directory unless ``cwd`` is given."""
        workdir.mkdir(parents=True, exist_ok=True)
        n = len(list(workdir.glob("out-*.txt")))
        out, err = stdout or workdir / f"out-{n}.txt", workdir / f"err-{n}.txt"
        reply = self._ask({"op": "spawn", "argv": argv, "env": engine_env(faults), "cwd": str(cwd or workdir),
                           "out": str(out), "err": str(err), "tty": tty, "entry": entry, "path": path or []})
        return Engine(self, reply["pid"], out, err)

    def wait(self, pid: int, timeout: float) -> int | None:
        """Exit code of a spawned engine (negative: killed by that signal), None if still running."""
        return self._ask({"op": "wait", "pid": pid, "timeout": timeout})["status"]

    def close(self) -> None:
        """Stop the server (engines it started are reaped or killed by their tests)."""
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@dataclass
class Engine:
    """One running engine: signal it, follow its output, wait for its exit code."""

    server: ForkServer
    pid: int
    out: Path
    err: Path
    code: int | None = None

    def lines(self) -> list[str]:
        """Every complete stdout line so far."""
        try:
            text = self.out.read_text(errors="replace")
        except FileNotFoundError:
            return []
        return text.split("\n")[:-1]

    def wait_for(self, pattern: str, timeout: float = 60, after: int = 0) -> re.Match:
        """First stdout line (from line ``after`` on) matching ``pattern``; polls, fails after ``timeout`` s."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            for line in self.lines()[after:]:
                match = regex.search(line)
                if match:
                    return match
            if self.code is None:
                self.code = self.server.wait(self.pid, 0)
            if self.code is not None:  # exited: one last look, then give up
                for line in self.lines()[after:]:
                    if regex.search(line):
                        return regex.search(line)
                raise AssertionError(f"engine exited {self.code} before printing /{pattern}/:\n"
                                     + "\n".join(self.lines()[-15:]) + self.err.read_text()[-2000:])
            if time.monotonic() > deadline:
                raise AssertionError(f"no /{pattern}/ within {timeout} s:\n" + "\n".join(self.lines()[-15:]))
            time.sleep(0.02)

    def signal(self, sig: int) -> None:
        """Send a signal to the engine."""
        os.kill(self.pid, sig)

    def wait(self, timeout: float = 60) -> int:
        """Exit code (negative: killed by that signal); kills the engine and fails if it outlives ``timeout``."""
        if self.code is None:
            self.code = self.server.wait(self.pid, timeout)
        if self.code is None:
            os.kill(self.pid, signal.SIGKILL)
            self.server.wait(self.pid, 10)
            raise AssertionError(f"engine {self.pid} still running after {timeout} s:\n"
                                 + "\n".join(self.lines()[-15:]))
        return self.code

    def last_step(self) -> int:
        """The highest step the engine reported finishing on stdout (0 before any)."""
        steps = [int(m.group(1)) for m in map(STEP_LINE.match, self.lines()) if m]
        return max(steps, default=0)

    def stderr(self) -> str:
        """Everything written to stderr."""
        return self.err.read_text(errors="replace") if self.err.exists() else ""


def checkpoint_files(directory: Path) -> list[Path]:
    """Every committed checkpoint file (temp files of interrupted writes excluded)."""
    return sorted(p for p in Path(directory).glob("*.safetensors"))


def verify_all(directory: Path) -> dict[str, str]:
    """name → "ok" or the CheckpointError message, for every checkpoint file in ``directory``."""
    from engine.checkpoint import format as ckpt

    report = {}
    for path in checkpoint_files(directory):
        try:
            ckpt.read(path)
            report[path.name] = "ok"
        except ckpt.CheckpointError as exc:
            report[path.name] = str(exc)
    return report


def events_of(run_dir: Path, kind: str) -> list[dict]:
    """The run's events of one type, in order (torn lines from a SIGKILL are skipped)."""
    from tests.conftest import read_events

    return [e for e in read_events(run_dir) if e["type"] == kind]
