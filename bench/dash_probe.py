"""What the dashboard benchmarks share: the training under test, the UI probes, key latency, process CPU.

- ``train_argv``: the same `demo` run for every variant;
- ``probe_env``: a terminal environment with bench/hooks on PYTHONPATH, so the
  dashboard process times its own screen updates (``BENCH_FRAME_LOG``);
- ``frames_between``: those updates inside a time window;
- ``key_latencies``: press ``l`` (log-y) and time until the status line's
  answer arrives at the terminal;
- ``cpu_seconds``: one process's CPU time (psutil).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from bench.common import ROOT, python
from bench.pty_run import PtyProcess, terminal_env
from bench.run_events import EventsFile

HOOKS = ROOT / "bench" / "hooks"
#: The cursor move to row 40, the last row of a 120×40 screen: Textual paints its first frame top to bottom,
#: so when this arrives the whole first screen (header, panels, footer row) is on the terminal.
FRAME_MARK = b"\x1b[40;1H"


def train_argv(steps: int, run_dir: Path) -> list[str]:
    """`sensorlm-tui train` on the demo preset, ``steps`` steps, evals only at both ends, 1 torch thread."""
    # --threads 1 everywhere: the dashboard's own default on 2 cores is cores-1 = 1, so the headless
    # baseline gets the same, and the comparison is about the UI, not about torch's thread count.
    # 16 validation samples: the start and end evals sit outside every window; smaller, they cost less wall time.
    return [python(), "-m", "tui.cli", "train", "--preset", "demo", "--max-steps", str(steps), "--eval-every", "0",
            "--checkpoint-every", "0", "--threads", "1", "--set", "sensorlm.data.val_samples=16",
            "--run-dir", str(run_dir)]


def probe_env(frame_log: Path) -> dict:
    """A UTF-8 256-colour terminal environment whose Textual processes log their screen updates to ``frame_log``."""
    env = terminal_env({"BENCH_FRAME_LOG": str(frame_log)})
    env["PYTHONPATH"] = str(HOOKS) + os.pathsep + env["PYTHONPATH"]
    return env


def frames_between(frame_log: Path, start: float, end: float) -> list[float]:
    """Milliseconds of each screen update that ended in [start, end) (the log is written at the app's exit)."""
    if not frame_log.exists():
        return []
    out = []
    for line in frame_log.read_text().splitlines():
        stamp, spent = line.split()
        if start <= float(stamp) < end:
            out.append(float(spent) * 1000)
    return out


def key_latencies(term: PtyProcess, events: EventsFile, presses: int) -> list[float]:
    """Press ``l`` up to ``presses`` times while the run still trains; milliseconds until each answer is on screen."""
    out = []
    for i in range(presses):
        events.read()
        if events.finished:
            break
        expected = b"log-y on" if i % 2 == 0 else b"log-y off"
        since = term.mark()
        sent = term.send(b"l")
        seen = term.wait_for(expected, since, timeout=10.0)
        if seen is not None:
            out.append(max(0.0, seen - sent) * 1000)
        time.sleep(0.5)
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process (all its threads, not its children)."""
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system
