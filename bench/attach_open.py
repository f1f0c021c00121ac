"""How long `sensorlm-tui attach` takes to show a run with 1,000,000 logged steps: `python -m bench.attach_open`.

Writes a synthetic finished run (``bench.open_run.write_run``: N step events
in the engine's byte format plus memory / system samples every 100 steps and
an eval every 10,000, ~330 MB at 1M steps), then measures "until the first
frame with the history drawn" two ways, each ``--repeat`` times:

- terminal: ``sensorlm-tui attach <run>`` started in a private tmux server
  (120×40, UTF-8) until ``capture-pane`` shows the progress panel at the last
  step (``step N/N``): process start, imports, reading the log, folding it
  into the model, the first full render. Polled every 50 ms, so ±50 ms.
  Skipped when tmux is missing.
- in-process: ``AttachApp`` under ``App.run_test`` (no terminal, no process
  start) until the rendered screen shows the same text: reading + folding +
  rendering only.

Also timed on the same run: `sensorlm-tui runs DIR` (a subprocess, so with
Python's start-up) and ``run_index.summarize`` alone — both read only
status.json and the log's last 1 MiB, whatever its length.

Each open is reported as wall time and as the CPU seconds the viewer process used
until then: on a shared, loaded machine the wall time mostly measures the
neighbours (measured: 25 s wall for 7.6 s CPU of history reading at load 7
on 2 cores), the CPU time is what an idle machine would take, roughly.

Prints plain lines; as a suite module (``run``) it returns a Section.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.common import ROOT, Section, fmt_stats, smoke
from bench.open_run import write_run

#: Poll interval of both measurements (s).
POLL_S = 0.05
#: Give up on one open after this long (s).
TIMEOUT_S = 300.0


def _done(text: str, steps: int) -> bool:
    return re.search(rf"step {steps}/{steps}\b", text) is not None


def terminal_open(run: Path, steps: int) -> tuple[float, float]:
    """(wall, CPU) seconds from starting `sensorlm-tui attach` in tmux to the history on screen."""
    import psutil

    socket = f"bench-attach-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    env = f"export LANG=C.UTF-8 LC_ALL=C.UTF-8 TERM=xterm-256color PYTHONPATH={shlex.quote(str(ROOT))};"
    command = f"{env} exec {shlex.quote(sys.executable)} -m tui.cli attach {shlex.quote(str(run))}"
    tmux = ["tmux", "-L", socket]
    try:
        start = time.perf_counter()
        subprocess.run([*tmux, "new-session", "-d", "-s", "b", "-x", "120", "-y", "40", command], check=True)
        pane = int(subprocess.run([*tmux, "display-message", "-p", "-t", "b", "#{pane_pid}"], capture_output=True,
                                  text=True).stdout)  # the app itself: the shell exec'd it
        viewer = psutil.Process(pane)
        while time.perf_counter() - start < TIMEOUT_S:
            text = subprocess.run([*tmux, "capture-pane", "-p", "-t", "b"], capture_output=True, text=True).stdout
            if _done(text, steps):
                cpu = viewer.cpu_times()
                return time.perf_counter() - start, cpu.user + cpu.system
            time.sleep(POLL_S)
        raise RuntimeError(f"attach did not show step {steps} within {TIMEOUT_S:.0f} s; screen:\n{text}")
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def inprocess_open(run: Path, steps: int) -> tuple[float, float]:
    """(wall, CPU) seconds from AttachApp start (run_test, no terminal) to the history on the rendered screen."""
    from engine.client import RunClient
    from tui.attach_app import AttachApp

    async def body() -> tuple[float, float]:
        start, cpu0 = time.perf_counter(), time.process_time()
        app = AttachApp(lambda: RunClient(run, read_only=True), run, read_only=True)
        async with app.run_test(size=(120, 40)) as pilot:
            while time.perf_counter() - start < TIMEOUT_S:
                text = "\n".join(strip.text for strip in app.screen._compositor.render_strips())
                if _done(text, steps):
                    return time.perf_counter() - start, time.process_time() - cpu0
                await pilot.pause(POLL_S)
        raise RuntimeError(f"in-process attach did not show step {steps} within {TIMEOUT_S:.0f} s")

    return asyncio.run(body())


def measure(steps: int, repeat: int, directory: Path | None = None) -> dict[str, list[tuple[float, float]] | str]:
    """Build the run, time both opens ``repeat`` times ((wall, CPU) each); a skipped variant maps to its reason."""
    out: dict[str, list[tuple[float, float]] | str] = {}
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        run = Path(tmp) / "bench-attach"
        start = time.perf_counter()
        path = write_run(run, steps)
        print(f"wrote {steps:,} steps, {path.stat().st_size / 2**20:.0f} MiB in {time.perf_counter() - start:.1f} s",
              flush=True)
        start = time.perf_counter()
        listed = subprocess.run([sys.executable, "-m", "tui.cli", "runs", str(run.parent)], capture_output=True,
                                text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        out["runs"] = [(time.perf_counter() - start, 0.0)]
        assert run.name in listed.stdout, listed.stdout + listed.stderr
        from tui.run_index import summarize

        start = time.perf_counter()
        summarize(run)
        out["summarize"] = [(time.perf_counter() - start, 0.0)]
        if shutil.which("tmux"):
            out["terminal"] = [terminal_open(run, steps) for _ in range(repeat)]
        else:
            out["terminal"] = "tmux not installed"
        out["in-process"] = [inprocess_open(run, steps) for _ in range(repeat)]
    return out


def _cell(values, which: int) -> str:
    return values if isinstance(values, str) else f"{fmt_stats([v[which] for v in values], '.2f')} s"


def run(quick: bool = False) -> Section:
    """Suite entry: 1M steps, 3 repeats (--quick: 100k steps, 1 repeat)."""
    steps, repeat = (2_000, 1) if smoke() else (100_000, 1) if quick else (1_000_000, 3)
    results = measure(steps, repeat)
    body = "\n".join([
        f"Synthetic finished run with {steps:,} step events; time until the first frame shows the history "
        f"(`step {steps}/{steps}` on screen), {repeat} repeat(s), 120×40.", "",
        "| how | wall | CPU of the viewer |", "|---|---|---|",
        f"| `sensorlm-tui attach RUN` in tmux (process start → frame) | {_cell(results['terminal'], 0)} | "
        f"{_cell(results['terminal'], 1)} |",
        f"| AttachApp under run_test (read + fold + render) | {_cell(results['in-process'], 0)} | "
        f"{_cell(results['in-process'], 1)} |",
        f"| `sensorlm-tui runs DIR` (subprocess) | {_cell(results['runs'], 0)} | – |",
        f"| `run_index.summarize(run)` | {_cell(results['summarize'], 0)} | – |",
    ])
    return Section("attach: opening a long run", f"python -m bench --only attach_open{' --quick' if quick else ''}",
                   body)


def main(argv: list[str] | None = None) -> int:
    """Command line: --steps, --repeat, --dir."""
    parser = argparse.ArgumentParser(prog="python -m bench.attach_open", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where to write the run (default a temp dir)")
    args = parser.parse_args(argv)
    for name, values in measure(args.steps, args.repeat, args.dir).items():
        if name in ("runs", "summarize"):
            print(f"{name}: wall {values[0][0] * 1e3:.0f} ms")
        elif isinstance(values, str):
            print(f"{name}: skipped ({values})")
        else:
            print(f"{name}: wall " + ", ".join(f"{w:.2f}" for w, _ in values) + f" s (median {_cell(values, 0)}); "
                  f"CPU " + ", ".join(f"{c:.2f}" for _, c in values) + f" s (median {_cell(values, 1)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
