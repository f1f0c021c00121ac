"""A command in a real pseudo-terminal: every byte it writes, time-stamped, and keys sent to it.

The dashboard benchmarks need what a user's terminal sees: a pty of a given
size (the app sizes itself from TIOCGWINSZ), its output read and discarded as
fast as it comes (a terminal that stops reading stalls Textual's writer), the
bytes counted per moment, and keys written to the master side. A reader
thread does the reading so the benchmark's own thread can sleep or poll files;
it costs one wake-up per chunk, ~1 % of a core at the dashboard's 1-10 KB/s.
Timestamps are ``time.time()`` so they compare with events.jsonl's ``t``.
"""

from __future__ import annotations

import fcntl
import os
import pty
import signal
import struct
import subprocess
import termios
import threading
import time
from pathlib import Path

from bench.common import ROOT


def terminal_env(extra: dict | None = None) -> dict:
    """Environment of a UTF-8, 256-colour terminal (what the dashboard is written for), plus ``extra``."""
    env = dict(os.environ, TERM="xterm-256color", COLORTERM="truecolor", LANG="C.UTF-8", LC_ALL="C.UTF-8")
    env.pop("NO_COLOR", None)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra or {})
    return env


class PtyProcess:
    """``argv`` on the slave side of a new pty of ``size`` (columns, rows); output collected by a thread."""

    def __init__(self, argv: list[str], size: tuple[int, int] = (120, 40), env: dict | None = None,
                 cwd: Path = ROOT) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
        self.started = time.time()
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=cwd,
                                     env=env if env is not None else terminal_env(), start_new_session=True)
        os.close(slave)
        self.master = master
        #: (time.time() at read, byte count) per chunk read.
        self.chunks: list[tuple[float, int]] = []
        self.output = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True, name="pty-reader")
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: every slave fd is closed (the app and its children exited)
                return
            if not data:
                return
            now = time.time()
            with self._lock:
                self.chunks.append((now, len(data)))
                self.output += data

    def mark(self) -> int:
        """Current length of the output (to search only what comes after it)."""
        with self._lock:
            return len(self.output)

    def wait_for(self, needle: bytes, since: int = 0, timeout: float = 60.0, poll: float = 0.005) -> float | None:
        """time.time() when ``needle`` was first seen after offset ``since`` (None on timeout).

        The time is the arrival of the chunk that completed the match (chunk resolution: the
        reader wakes on each write the app makes), not the moment of this poll.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # Asked before the search, not after: the reader can take the last bytes and end between the two,
            # and a search made before that would miss output that did come.
            ended = self.proc.poll() is not None and not self._reader.is_alive()
            with self._lock:
                at = self.output.find(needle, since)
                if at >= 0:
                    end, total = at + len(needle), 0
                    for stamp, count in self.chunks:
                        total += count
                        if total >= end:
                            return stamp
            if ended:
                return None
            time.sleep(poll)
        return None

    def first_output(self, min_bytes: int, timeout: float = 60.0) -> float | None:
        """time.time() when at least ``min_bytes`` had arrived (None on timeout)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                total = 0
                for stamp, count in self.chunks:
                    total += count
                    if total >= min_bytes:
                        return stamp
            time.sleep(0.005)
        return None

    def bytes_between(self, start: float, end: float) -> int:
        """Bytes that arrived in [start, end) (time.time())."""
        with self._lock:
            return sum(count for stamp, count in self.chunks if start <= stamp < end)

    def send(self, keys: bytes) -> float:
        """Write ``keys`` to the terminal as if typed; returns time.time() just before the write.

        Stamped before, not after: the reader thread can see the answer before this thread runs again.
        """
        sent = time.time()
        os.write(self.master, keys)
        return sent

    def close(self, timeout: float = 30.0) -> int | None:
        """Wait for the process (SIGKILL to its group after ``timeout``); return its exit code."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            code = self.proc.wait(10)
        self._reader.join(5)
        try:
            os.close(self.master)
        except OSError:
            pass
        return code
