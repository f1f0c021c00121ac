"""What the dashboard costs the training it shows: `python -m bench.dashboard_overhead [--quick]`.

The same `demo` training (batch 16, 1 torch thread, eval and periodic
checkpoints off) run three ways, interleaved round by round:

- headless: ``sensorlm-tui train --headless`` with its lines sent to /dev/null;
- dashboard, engine process (the default): ``sensorlm-tui train`` in a real
  pseudo-terminal of 120×40 whose output is read and discarded (counted);
- dashboard, ``--in-process``: the Trainer in the dashboard's worker thread.

Steps/s comes from the run's own events.jsonl timestamps over a steady window
(from 15 % of the steps but not before step 20, to 70 %: start-up — the UI's
first renders overlap the engine's first ~15 steps —, the step-0 eval and the
final checkpoint are outside it). In the same window: bytes/s written to the
terminal and the dashboard process's CPU use (process mode: the UI alone).
After the window, while the run still trains, ``l`` (log-y) is pressed a few
times and the time until the status line's "log-y on/off" reaches the
terminal is the key-to-screen latency. Screen updates (count and duration)
are timed inside the dashboard process by bench/hooks/sitecustomize.py.
Goals: process ≥ 0.99 of headless (the dashboard issue asks ≥ 0.98),
in-process ≥ 0.95, < 10 KB/s at the default refresh.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from bench.common import ROOT, Section, fmt_stats, interleave, python, ratios, smoke, stats, verdict
from bench.pty_run import PtyProcess, terminal_env
from bench.run_events import EventsFile, steps_per_s, window

HOOKS = ROOT / "bench" / "hooks"
#: Fraction of the run's steps where the steady window starts and ends, and the earliest start (steps).
#: Measured: under the dashboard the first ~15 steps run ~20 % slower (the UI's first renders and imports
#: overlap the engine's first steps), later steps match headless; a window from step 4 read that as overhead.
WINDOW = (0.15, 0.70, 20)
#: Key presses after the window (each waits for the screen, then ~0.5 s).
KEY_PRESSES = 4
TIMEOUT_S = 900.0
VARIANTS = ("headless", "dashboard (engine process)", "dashboard (--in-process)")


def _train_argv(steps: int, run_dir: Path) -> list[str]:
    # --threads 1 everywhere: the dashboard's own default on 2 cores is cores-1 = 1, so the headless
    # baseline gets the same, and the comparison is about the UI, not about torch's thread count.
    # 16 validation samples: the start and end evals sit outside the window; smaller, they cost less wall time.
    return [python(), "-m", "tui.cli", "train", "--preset", "demo", "--max-steps", str(steps), "--eval-every", "0",
            "--checkpoint-every", "0", "--threads", "1", "--set", "data.val_samples=16", "--run-dir", str(run_dir)]


def _cpu_seconds(pid: int) -> float:
    """utime + stime of one process (not its children) from /proc, seconds."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def headless(steps: int, root: Path) -> dict:
    """One headless run: steps/s over the window."""
    run_dir = root / f"headless-{uuid.uuid4().hex[:6]}"
    with open(os.devnull, "w") as devnull:
        # A session of its own, like the dashboard (pty) and its engine (launcher): with Linux's autogroup
        # scheduling a busy box shares CPU per session, so all variants must be scheduled alike.
        subprocess.run(_train_argv(steps, run_dir) + ["--headless"], cwd=ROOT, stdin=subprocess.DEVNULL,
                       stdout=devnull, stderr=devnull, env=terminal_env(), timeout=TIMEOUT_S, check=True,
                       start_new_session=True)
    events = EventsFile(run_dir / "events.jsonl")
    events.read()
    lo, hi = window(steps, *WINDOW)
    return {"steps_per_s": steps_per_s(events.steps, lo, hi)}


def _key_latencies(term: PtyProcess, events: EventsFile, presses: int) -> list[float]:
    """Press ``l`` up to ``presses`` times while the run still trains; seconds until each answer is on screen."""
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
            out.append(max(0.0, seen - sent))
        time.sleep(0.5)
    return out


def dashboard(steps: int, root: Path, in_process: bool, presses: int = KEY_PRESSES) -> dict:
    """One dashboard run in a 120×40 pty: steps/s, terminal bytes/s and UI CPU over the window, key latency."""
    run_dir = root / f"dash-{'inproc' if in_process else 'proc'}-{uuid.uuid4().hex[:6]}"
    argv = _train_argv(steps, run_dir) + (["--in-process"] if in_process else [])
    frame_log = root / f"frames-{run_dir.name}.txt"
    env = terminal_env({"BENCH_FRAME_LOG": str(frame_log)})
    env["PYTHONPATH"] = str(HOOKS) + os.pathsep + env["PYTHONPATH"]  # the frame probe (bench/hooks)
    term = PtyProcess(argv, size=(120, 40), env=env)
    events = EventsFile(run_dir / "events.jsonl")
    alive = lambda: term.proc.poll() is None  # noqa: E731
    lo, hi = window(steps, *WINDOW)
    try:
        t_lo = events.wait_step(lo, TIMEOUT_S, alive)
        cpu_lo, wall_lo = _cpu_seconds(term.proc.pid), time.time()
        t_hi = events.wait_step(hi, TIMEOUT_S, alive)
        cpu_hi, wall_hi = _cpu_seconds(term.proc.pid), time.time()
        if t_lo is None or t_hi is None:
            raise RuntimeError(f"dashboard run did not reach steps {lo}..{hi}; output tail: "
                               f"{bytes(term.output[-400:])!r}")
        keys = _key_latencies(term, events, presses)
        events.wait_finished(TIMEOUT_S, alive)
        for _ in range(5):  # q on a finished run quits (a modal or a slow first q: try again)
            if not alive():
                break
            term.send(b"q")
            time.sleep(1.0)
    finally:
        code = term.close(timeout=30.0)
    if code not in (0, None):
        raise RuntimeError(f"dashboard exited {code}; output tail: {bytes(term.output[-400:])!r}")
    frames = [float(spent) * 1000 for end, spent in (line.split() for line in frame_log.read_text().splitlines())
              if t_lo <= float(end) < t_hi] if frame_log.exists() else []
    return {"steps_per_s": steps_per_s(events.steps, lo, hi),
            "kbps": term.bytes_between(t_lo, t_hi) / 1024 / (t_hi - t_lo),
            "ui_cpu": (cpu_hi - cpu_lo) / (wall_hi - wall_lo) * 100,
            "keys_ms": [k * 1000 for k in keys], "frames_ms": frames, "fps": len(frames) / (t_hi - t_lo)}


def measure(steps: int, rounds: int, presses: int = KEY_PRESSES) -> dict[str, list[dict]]:
    """The three variants, interleaved (A B C, C B A, …), ``rounds`` times."""
    with tempfile.TemporaryDirectory(prefix="bench-dash-") as tmp:
        root = Path(tmp)
        return interleave({VARIANTS[0]: lambda: headless(steps, root),
                           VARIANTS[1]: lambda: dashboard(steps, root, False, presses),
                           VARIANTS[2]: lambda: dashboard(steps, root, True, presses)}, rounds)


def _col(results: list[dict], key: str) -> list[float]:
    return [r[key] for r in results]


def run(quick: bool = False) -> Section:
    """Suite entry: quick 50 steps × 2 rounds, full 200 steps × 3 rounds (smoke: 24 steps, 1 round)."""
    steps, rounds, presses = (24, 1, 1) if smoke() else (50, 2, 2) if quick else (200, 3, KEY_PRESSES)
    results = measure(steps, rounds, presses)
    base = _col(results[VARIANTS[0]], "steps_per_s")
    lines = ["| variant | steps/s | ÷ headless | terminal KB/s | dashboard process CPU % | screen updates/s | "
             "screen update ms | key → screen ms |", "|---|---:|---:|---:|---:|---:|---:|---:|",
             f"| {VARIANTS[0]} | {fmt_stats(base, '.2f')} | 1 | — | — | — | — | — |"]
    verdicts = []
    for name, goals in ((VARIANTS[1], (("engine process ÷ headless steps/s", 0.99),
                                       ("engine process ÷ headless steps/s (dashboard issue)", 0.98))),
                        (VARIANTS[2], (("--in-process ÷ headless steps/s", 0.95),))):
        rows = results[name]
        ratio = ratios(_col(rows, "steps_per_s"), base)
        keys = [k for r in rows for k in r["keys_ms"]]
        frames = [f for r in rows for f in r.get("frames_ms", [])]
        lines.append(f"| {name} | {fmt_stats(_col(rows, 'steps_per_s'), '.2f')} | {fmt_stats(ratio)} | "
                     f"{fmt_stats(_col(rows, 'kbps'), '.1f')} | {fmt_stats(_col(rows, 'ui_cpu'), '.0f')} | "
                     f"{fmt_stats([r.get('fps', 0.0) for r in rows], '.1f')} | "
                     f"{fmt_stats(frames, '.1f') if frames else 'n/a'} | {fmt_stats(keys, '.0f') if keys else 'n/a'} |")
        verdicts += [verdict(label, stats(ratio)[1], goal) for label, goal in goals]
    kbps = _col(results[VARIANTS[1]], "kbps") + _col(results[VARIANTS[2]], "kbps")
    verdicts.append(verdict("dashboard terminal bytes at default refresh (120×40)", stats(kbps)[1], 10.0,
                            higher_is_better=False, unit=" KB/s"))
    lo, hi = window(steps, *WINDOW)
    body = "\n".join(lines) + "\n\n" + (
        f"SensorLM `demo` preset, batch 16, 1 torch thread, eval (16 samples) only at both ends, periodic "
        f"checkpoints off, {steps} steps per "
        f"run, {rounds} interleaved round(s) (headless, process, in-process, then reversed). Steps/s from the "
        f"run's events.jsonl between steps {lo} and {hi}; ratios are per round. Terminal bytes and CPU are over the "
        "same window (CPU of the dashboard process only: in process mode that is the UI, in-process it includes "
        "the training). Key latency: `l` pressed after the window while training, until `log-y on/off` arrives "
        "at the pty (chunk resolution). Screen updates: Textual's `Screen._on_timer_update` calls that did work "
        "(re-render dirty widgets, composite, write), timed inside the dashboard process by the probe in "
        "bench/hooks; in-process they include waiting for the GIL the training thread holds. Message handling "
        "(folding events, reducing plot columns) happens outside them; the plot's own build is timed in the "
        "loss-plot section.")
    return Section("Dashboard overhead on training throughput",
                   f"python -m bench --only dashboard_overhead{' --quick' if quick else ''}", body, verdicts)


def main() -> None:
    """Command line: print the section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    section = run(quick=parser.parse_args().quick)
    print(section.body)
    print("\n".join(section.verdicts))


if __name__ == "__main__":
    main()
