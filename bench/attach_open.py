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
  start) until the rendered screen shows the same text: reading + rendering
  only; then on until the run's step record holds every step (a cold open
  converts the log, the charts filling in as it goes: tui.model.step_open).

Both opens are timed cold (the run as an older version wrote it: every step
in events.jsonl, no step record; the first viewer converts the log once) and
warm (the record there: every later viewer, and every run this version
writes). The four variants are interleaved round by round (terminal cold,
in-process cold, terminal warm, in-process warm, then again), so load drift on
a shared machine spreads over all of them.

Also on the same run: reading ÷ plain ``json.loads`` per line (CPU; the
reader against ``json.loads`` of the first 200,000 lines, scaled);
`sensorlm-tui runs DIR` (a subprocess, so with Python's start-up) and
``run_index.summarize`` alone — both read only status.json and the log's last
1 MiB, whatever its length.

Each open is reported as wall time and as the CPU seconds the viewer process used
until then: on a shared, loaded machine the wall time mostly measures the
neighbours (measured: 25 s wall for 7.6 s CPU of history reading at load 7
on 2 cores), the CPU time is what an idle machine would take, roughly.

Prints plain lines; as a suite module (``run``) it returns a Section.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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

from bench.common import ROOT, Section, fmt_stats, smoke, verdict
from bench.open_run import write_run
from engine.run.history import read_history
from engine.run.steps import record_dir

#: Poll interval of both measurements (s).
POLL_S = 0.05
#: Give up on one open after this long (s).
TIMEOUT_S = 300.0
#: Lines ``json.loads`` decodes for the reading ratio (scaled to the whole log).
JSON_LINES = 200_000


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


def inprocess_open(run: Path, steps: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """(wall, CPU) seconds from AttachApp start (run_test, no terminal) to the history on the rendered screen,
    and to every step in the run's step record (a cold open converts the log after its first chunk is shown)."""
    from engine.run.control.client import RunClient
    from tui.dashboard.attach_app import AttachApp

    async def body() -> tuple[tuple[float, float], tuple[float, float]]:
        start, cpu0 = time.perf_counter(), time.process_time()
        app = AttachApp(lambda: RunClient(run, read_only=True), run, read_only=True)
        frame = None
        async with app.run_test(size=(120, 40)) as pilot:
            while time.perf_counter() - start < TIMEOUT_S:
                if frame is None:
                    text = "\n".join(strip.text for strip in app.screen._compositor.render_strips())
                    if _done(text, steps):
                        frame = time.perf_counter() - start, time.process_time() - cpu0
                if frame is not None and app.model.steps_progress is None and app.model.step_count == steps:
                    return frame, (time.perf_counter() - start, time.process_time() - cpu0)
                await pilot.pause(POLL_S)
        raise RuntimeError(f"in-process attach did not show and fold step {steps} within {TIMEOUT_S:.0f} s")

    return asyncio.run(body())


def reading_ratio(run: Path, repeat: int) -> tuple[float, float, float]:
    """(reader CPU s, json.loads-per-line CPU s scaled to every line, their ratio)."""
    events = run / "events.jsonl"
    reader = min(_cpu(lambda: read_history(events)) for _ in range(repeat))
    with open(events, "rb") as handle:
        lines = handle.read().split(b"\n")
    total = sum(1 for line in lines if line)
    head = [line for line in lines[:JSON_LINES] if line]
    del lines
    plain = min(_cpu(lambda: [json.loads(line) for line in head]) for _ in range(repeat)) * total / len(head)
    return reader, plain, reader / plain


def _cpu(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def measure(steps: int, repeat: int, directory: Path | None = None) -> dict[str, list[tuple[float, float]] | str]:
    """Build the run, time each open cold and warm ``repeat`` times ((wall, CPU) each); a skipped one maps to why."""
    out: dict[str, list[tuple[float, float]] | str] = {}
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        run = Path(tmp) / "bench-attach"
        start = time.perf_counter()
        path = write_run(run, steps)
        print(f"wrote {steps:,} steps, {path.stat().st_size / 2**20:.0f} MiB in {time.perf_counter() - start:.1f} s",
              flush=True)
        reader, plain, ratio = reading_ratio(run, repeat)
        out["reading"] = [(reader, plain)]
        out["ratio"] = [(ratio, ratio)]
        start = time.perf_counter()
        listed = subprocess.run([sys.executable, "-m", "tui.cli", "runs", str(run.parent)], capture_output=True,
                                text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        out["runs"] = [(time.perf_counter() - start, 0.0)]
        assert run.name in listed.stdout, listed.stdout + listed.stderr
        from tui.model.run_index import summarize

        start = time.perf_counter()
        summarize(run)
        out["summarize"] = [(time.perf_counter() - start, 0.0)]
        def cold(fn):
            shutil.rmtree(record_dir(run), ignore_errors=True)
            return fn(run, steps)

        def warm(fn):
            from tui.model.step_open import open_or_convert

            open_or_convert(run)
            return fn(run, steps)

        tmux = shutil.which("tmux") is not None
        if not tmux:
            out["terminal cold"] = out["terminal warm"] = "tmux not installed"
        for state in ("cold", "warm"):
            out[f"in-process {state}"], out[f"in-process {state} folded"] = [], []
            if tmux:
                out[f"terminal {state}"] = []
        for _ in range(repeat):  # interleaved: every variant once per round
            for state, prepare in (("cold", cold), ("warm", warm)):
                if tmux:
                    out[f"terminal {state}"].append(prepare(terminal_open))
                frame, folded = prepare(inprocess_open)
                out[f"in-process {state}"].append(frame)
                out[f"in-process {state} folded"].append(folded)
    return out


def _cell(values, which: int) -> str:
    return values if isinstance(values, str) else f"{fmt_stats([v[which] for v in values], '.2f')} s"


def run(quick: bool = False) -> Section:
    """Suite entry: 1M steps, 5 interleaved rounds (--quick: 3 rounds; smoke: 2,000 steps, 1 round)."""
    steps, repeat = (2_000, 1) if smoke() else (1_000_000, 3) if quick else (1_000_000, 5)
    results = measure(steps, repeat)
    reader, plain = results["reading"][0]
    ratio = results["ratio"][0][0]
    rows = []
    for state in ("cold", "warm"):
        for how, key in (("`sensorlm-tui attach RUN` in tmux (process start → frame)", "terminal {}"),
                         ("AttachApp under run_test (read + render)", "in-process {}"),
                         ("AttachApp under run_test, until the record holds every step", "in-process {} folded")):
            values = results[key.format(state)]
            rows.append(f"| {how}, {state} | {_cell(values, 0)} | {_cell(values, 1)} |")
    body = "\n".join([
        f"Synthetic finished run with {steps:,} step events; time until the first frame shows the history "
        f"(`step {steps}/{steps}` on screen), {repeat} interleaved round(s), 120×40. Cold: a run of an older "
        "version, every step in its log and no step record (the first viewer converts the log once, the charts "
        "filling in as it goes); warm: the record present (every later viewer, and every run this version "
        "writes).", "",
        "| how | wall | CPU of the viewer |", "|---|---|---|", *rows,
        f"| `sensorlm-tui runs DIR` (subprocess) | {_cell(results['runs'], 0)} | – |",
        f"| `run_index.summarize(run)` | {_cell(results['summarize'], 0)} | – |", "",
        f"- reading the log (engine.run.history.store): {reader:.2f} s CPU; plain `json.loads` per line "
        f"(first {JSON_LINES:,} lines, scaled): {plain:.2f} s CPU; ratio **{ratio:.2f}**",
    ])
    verdicts = [verdict("attach_open: reading ÷ json.loads per line (CPU)", ratio, 0.5, higher_is_better=False)]
    for key in ("terminal warm", "terminal cold"):
        if not isinstance(results[key], str):
            first = sorted(w for w, _ in results[key])[len(results[key]) // 2]
            verdicts.append(verdict(f"attach_open: {steps:,} steps → first full frame, {key} (wall)", first, 2.0,
                                    higher_is_better=False, unit=" s"))
    return Section("attach: opening a long run", f"python -m bench --only attach_open{' --quick' if quick else ''}",
                   body, verdicts)


def main(argv: list[str] | None = None) -> int:
    """Command line: --steps, --repeat, --dir."""
    parser = argparse.ArgumentParser(prog="python -m bench.attach_open", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where to write the run (default a temp dir)")
    args = parser.parse_args(argv)
    for name, values in measure(args.steps, args.repeat, args.dir).items():
        if name == "reading":
            print(f"reading: {values[0][0]:.2f} s CPU (engine.run.history.store) vs {values[0][1]:.2f} s CPU "
                  f"(json.loads per line, scaled)")
        elif name == "ratio":
            print(f"reading ÷ json.loads: {values[0][0]:.2f}")
        elif name in ("runs", "summarize"):
            print(f"{name}: wall {values[0][0] * 1e3:.0f} ms")
        elif isinstance(values, str):
            print(f"{name}: skipped ({values})")
        else:
            print(f"{name}: wall " + ", ".join(f"{w:.2f}" for w, _ in values) + f" s (median {_cell(values, 0)}); "
                  f"CPU " + ", ".join(f"{c:.2f}" for _, c in values) + f" s (median {_cell(values, 1)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
