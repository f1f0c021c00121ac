"""The real viewer under a terminal: `sensorlm-tui attach RUN` in a private tmux server, watched from outside.

What a user sees is what is measured: tmux keeps the screen (``screen()`` is ``capture-pane``), keys go in
through ``send-keys``, and the process is read from /proc:

- ``rss_mib`` / ``peak_mib``: the viewer's resident memory now, and the kernel's high-water mark of it
  (VmHWM: a peak between two samples is not missed); ``RssSampler`` samples it on a thread through a whole
  phase and kills the viewer past a cap (the old viewer took 14.6 GB of this 23 GB box on 10,000 names: a
  bench must not take the box down with it; the row then says where it was stopped);
- frames: bench/hooks on PYTHONPATH with ``BENCH_FRAME_LOG`` make the app log each screen update's end time
  and duration (bench.dash_probe), written when it exits: a key's frame time is read from it afterwards.

The pane is 120×40 with tmux's status line off (the app gets all 40 rows), UTF-8, 256 colours.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.common import ROOT, Periodic
from bench.dash_probe import HOOKS

#: The screen size every open is measured at.
SIZE = (120, 40)
#: Seconds between two looks at the screen while waiting for something on it.
POLL_S = 0.05
_BRAILLE = re.compile("[\u2801-\u28ff]")
_STEP = re.compile(r"step (\d+)/(\d+)")
_BAR = re.compile(r"converting.*[█░]{8,} \d+%")


def braille_cells(text: str) -> int:
    """Chart dots on a screen: braille cells other than the blank one."""
    return len(_BRAILLE.findall(text))


def shown_step(text: str) -> int | None:
    """The step the progress panel shows (``step N/TOTAL``), None before it shows one."""
    found = _STEP.search(text)
    return int(found.group(1)) if found else None


def conversion_bar(text: str) -> bool:
    """Whether a screen shows an old run's conversion with its progress bar (a line saying "converting" with a
    bar and a percentage: the status line's "converting the old log into a step record ████░░░░ 42%")."""
    return any(_BAR.search(line) for line in text.lower().splitlines())


def full_frame(text: str, step: int) -> bool:
    """The first full frame of a run whose last step is ``step``: the progress panel at that step, and a chart
    drawn (at least a few dozen braille dots)."""
    return shown_step(text) == step and braille_cells(text) >= 24


def _status_mib(pid: int, field: str) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class Viewer:
    """`sensorlm-tui attach RUN` in a private tmux server (module docstring). ``frame_log``: where the app logs its
    screen updates (None: no probe)."""

    def __init__(self, run: Path, frame_log: Path | None = None, args: tuple[str, ...] = ()) -> None:
        self.socket = f"bench-long-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.tmux = ["tmux", "-L", self.socket]
        self.frame_log = frame_log
        env = {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "xterm-256color", "COLORTERM": "truecolor",
               "PYTHONPATH": str(ROOT)}
        if frame_log is not None:
            env.update(BENCH_FRAME_LOG=str(frame_log), PYTHONPATH=f"{HOOKS}{os.pathsep}{ROOT}")
        exports = " ".join(f"{key}={shlex.quote(value)}" for key, value in env.items())
        command = (f"export {exports}; exec {shlex.quote(sys.executable)} -m tui.cli attach "
                   f"{shlex.quote(str(run))} {' '.join(map(shlex.quote, args))}")
        with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as conf:
            conf.write("set -g status off\n")
        self._conf = conf.name
        self.started = time.perf_counter()
        subprocess.run([*self.tmux, "-f", self._conf, "new-session", "-d", "-s", "b", "-x", str(SIZE[0]), "-y",
                        str(SIZE[1]), command], check=True)
        self.pid = int(subprocess.run([*self.tmux, "display-message", "-p", "-t", "b", "#{pane_pid}"],
                                      capture_output=True, text=True).stdout)

    def screen(self) -> str:
        return subprocess.run([*self.tmux, "capture-pane", "-p", "-t", "b"], capture_output=True, text=True).stdout

    def alive(self) -> bool:
        try:
            with open(f"/proc/{self.pid}/stat") as handle:
                return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    def wait_for(self, predicate, timeout: float) -> tuple[float | None, str]:
        """(seconds since start when ``predicate(screen)`` first held, or None at the timeout or the viewer's exit;
        the last screen seen)."""
        text = ""
        while time.perf_counter() - self.started < timeout:
            text = self.screen()
            if predicate(text):
                return time.perf_counter() - self.started, text
            if not self.alive():
                return None, text
            time.sleep(POLL_S)
        return None, text

    def send(self, *keys: str) -> float:
        """Keys as tmux names them (``+``, ``Left``, ``End``); returns time.time() just before sending."""
        sent = time.time()
        subprocess.run([*self.tmux, "send-keys", "-t", "b", *keys], capture_output=True)
        return sent

    def rss_mib(self) -> float | None:
        return _status_mib(self.pid, "VmRSS")

    def peak_mib(self) -> float | None:
        return _status_mib(self.pid, "VmHWM")

    def cpu_s(self) -> float | None:
        try:
            with open(f"/proc/{self.pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            return None

    def close(self, timeout: float = 20.0) -> None:
        """Quit as a user does (q; d at the live run's quit modal), so the frame log is written; then the server."""
        try:
            for key in ("q", "d", "q"):
                if not self.alive():
                    break
                self.send(key)
                deadline = time.monotonic() + timeout / 3
                while self.alive() and time.monotonic() < deadline:
                    time.sleep(0.05)
        finally:
            subprocess.run([*self.tmux, "kill-server"], capture_output=True)
            Path(self._conf).unlink(missing_ok=True)


class RssSampler(Periodic):
    """The viewer's RSS every ``interval`` seconds on a thread, from ``start()`` to ``stop()``; past ``cap_mib`` it
    kills the viewer and notes when (module docstring)."""

    thread_name = "rss-sampler"

    def __init__(self, viewer: Viewer, cap_mib: float, interval: float = 0.1) -> None:
        super().__init__(interval)
        self.viewer = viewer
        self.cap_mib = cap_mib
        #: (seconds since the viewer started, MiB) per sample.
        self.samples: list[tuple[float, float]] = []
        #: Seconds since start when the cap was hit (the viewer killed), else None.
        self.capped_at: float | None = None
        self.peak = 0.0

    def since(self, start_s: float) -> list[float]:
        """The samples taken ``start_s`` seconds after the viewer started, or later."""
        return [mib for at, mib in self.samples if at >= start_s]

    def sample(self) -> bool:
        rss = self.viewer.rss_mib()
        if rss is None:
            return False
        self.samples.append((time.perf_counter() - self.viewer.started, rss))
        self.peak = max(self.peak, self.viewer.peak_mib() or rss)
        if rss > self.cap_mib and self.capped_at is None:
            self.capped_at = time.perf_counter() - self.viewer.started
            try:
                os.kill(self.viewer.pid, 9)
            except ProcessLookupError:
                pass
            return False
        return True


def frames(frame_log: Path) -> list[tuple[float, float]]:
    """(end time.time(), seconds) of each screen update the app logged (at its exit)."""
    if not frame_log.exists():
        return []
    out = []
    for line in frame_log.read_text().splitlines():
        end, spent = line.split()
        out.append((float(end), float(spent)))
    return out


def key_frame_s(log: list[tuple[float, float]], sent: float, until: float, gap: float = 0.05) -> float | None:
    """Seconds from a key sent at ``sent`` to the end of the burst of screen updates that answered it: the first
    update ending after ``sent``, and each one that began within ``gap`` of the previous one's end (before
    ``until``, the next key). None when no update followed."""
    burst = [(end, spent) for end, spent in log if sent < end < until]
    if not burst:
        return None
    last = burst[0][0]
    for end, spent in burst[1:]:
        if end - spent - last > gap:
            break
        last = end
    return last - sent
