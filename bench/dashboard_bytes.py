"""Bytes the dashboard writes to its terminal at steady state: `python -m bench.dashboard_bytes [--quick]`.

Runs the real app in a pseudo-terminal at 120×40 (and 80×24) on a scripted
run that logs 20 steps/s with a memory and system sample every 10 steps and
an eval every 100, and counts what reaches the terminal after a warm-up. Over
SSH this is the bandwidth the dashboard needs; the goal is < 10 KB/s at the
default refresh. Variants: default (plots and text 1 Hz, the step row 4 Hz), --refresh 2,
and the 16-colour --ansi mode.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time

from bench.common import ROOT, Section, fmt_stats, smoke, stats, verdict

GOAL_KBPS = 10.0
STEPS_PER_S = 20


def child(seconds: float, refresh: float | None, ansi: bool) -> None:
    """The app side: a scripted live run, exits after ``seconds``."""
    from engine.run import events as ev
    from tui.dashboard.app import DashboardApp
    from tui.dashboard.scripted import ScriptedSession, demo_run

    history = demo_run(300, total_steps=100_000)
    live = []
    for step in range(301, 301 + int(seconds * STEPS_PER_S) + 100):
        live.append(ev.StepLogged(step=step, epoch=3, loss=0.3 + 0.05 * ((step * 7919) % 13) / 13, lr=2e-3,
                                  samples_per_s=640.0, steps_per_s=20.0, batch_size=32))
        if step % 10 == 0:
            live.append(ev.MemorySampled(step=step, allocated=(2 << 30) + (step % 7) * (1 << 20),
                                         peak=(2 << 30) + (9 << 20),
                                         reserved=(3 << 30), predicted=(2 << 30) + (40 << 20), budget=8 << 30,
                                         capacity=16 << 30))
            live.append(ev.SystemSampled(cpu_percent=50.0 + step % 40, ram_used=6 << 30, ram_total=16 << 30))
        if step % 100 == 0:
            live.append(ev.EvalDone(step=step, val_loss=0.33,
                                    metrics={"val_loss": 0.33, "psnr_db": 25.0 + (step % 300) / 300},
                                    primary="psnr_db", seconds=1.0))
    session = ScriptedSession(live, history=history, interval=1.0 / (STEPS_PER_S * 1.25))
    app = DashboardApp(lambda: session, refresh=refresh, ansi=ansi)
    app.call_later(lambda: app.set_timer(seconds, lambda: app.exit()))
    app.run()


def measure(size: tuple[int, int], seconds: float, warmup: float, refresh: float | None = None,
            ansi: bool = False) -> float:
    """KB/s written to the terminal between ``warmup`` and the end."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLORTERM="truecolor", PYTHONPATH=str(ROOT))
    env.pop("NO_COLOR", None)
    argv = [sys.executable, "-m", "bench.dashboard_bytes", "--child", "--seconds", str(seconds)]
    if refresh is not None:
        argv += ["--refresh", str(refresh)]
    if ansi:
        argv.append("--ansi")
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=ROOT, env=env, start_new_session=True)
    os.close(slave)
    start = time.monotonic()
    counted = 0
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not data:
                    break
                if time.monotonic() - start >= warmup:
                    counted += len(data)
            elif proc.poll() is not None:
                break
    finally:
        proc.wait(30)
        os.close(master)
    elapsed = time.monotonic() - start - warmup
    return counted / 1024 / max(elapsed, 1e-6)


def run(quick: bool = False) -> Section:
    """Measure and return the results section."""
    seconds, warmup, repeats = (5.0, 3.0, 1) if smoke() else (9.0, 4.0, 1) if quick else (25.0, 6.0, 3)
    variants = [("120×40, default (plots and text 1 Hz, the step row 4 Hz)", (120, 40), None, False),
                ("120×40, --refresh 2", (120, 40), 2.0, False),
                ("120×40, --ansi", (120, 40), None, True),
                ("80×24, default", (80, 24), None, False)][:1 if smoke() else None]
    results: dict[str, list[float]] = {name: [] for name, *_ in variants}
    for _ in range(repeats):
        for name, size, refresh, ansi in variants:
            results[name].append(measure(size, seconds, warmup, refresh, ansi))
    base = stats(results[variants[0][0]])[1]
    lines = ["| variant | KB/s | vs default |", "|---|---:|---:|"]
    for name, *_ in variants:
        lines.append(f"| {name} | {fmt_stats(results[name], '.1f')} | {stats(results[name])[1] / base:.2f}× |")
    body = "\n".join(lines) + (f"\n\nA scripted run logging {STEPS_PER_S} steps/s (memory + system every 10 steps, "
                               f"an eval every 100), {seconds - warmup:.0f} s counted after a {warmup:.0f} s warm-up, "
                               f"{repeats} round(s); bytes read from the pty master.")
    verdicts = [verdict("terminal bytes at 120×40, default refresh", base, GOAL_KBPS, higher_is_better=False,
                        unit=" KB/s")]
    return Section("Dashboard bytes on the wire", "python -m bench --only dashboard_bytes", body, verdicts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=10.0, help=argparse.SUPPRESS)
    parser.add_argument("--refresh", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--ansi", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.seconds, args.refresh, args.ansi)
        return
    section = run(quick=args.quick)
    print(section.body)
    for line in section.verdicts:
        print(line)


if __name__ == "__main__":
    main()
