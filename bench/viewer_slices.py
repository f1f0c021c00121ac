"""One live engine, a dashboard viewer attached and detached in alternating time slices: its cost, precisely.

The process-mode dashboard is a viewer of an engine through the run
directory, exactly as `sensorlm-tui attach` is (same DashboardApp, same
RunClient). So instead of comparing separate runs — which on a shared box
drift by ±15 % from one to the next — one headless engine trains for the whole
measurement and a viewer (`sensorlm-tui attach RUN` in a 120×40 pty) is
opened and closed around it: slices without a viewer and slices with one
alternate (none, viewer, viewer, none, …), each timed from the engine's own
events.jsonl, and each adjacent pair gives a ratio. The viewer's start-up
(process start, history, first frames) is outside its slice (``warm_s``);
after it detaches (q, d) the next bare slice waits ``SETTLE_S``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

from bench.common import ROOT, python
from bench.dash_probe import FRAME_MARK, cpu_seconds, frames_between, key_latencies, probe_env, train_argv
from bench.pty_run import PtyProcess, terminal_env
from bench.run_events import EventsFile

#: Seconds between a viewer's exit and the next bare slice.
SETTLE_S = 1.5
#: Steps the engine runs before the first slice (its own start-up and the step-0 eval are behind it).
WARM_STEPS = 20
TIMEOUT_S = 600.0


def rate_between(steps: list[tuple[int, float]], start: float, end: float) -> float:
    """Steps per second between the first and the last step logged inside [start, end) (NaN if < 2 steps)."""
    inside = [t for _, t in steps if start <= t < end]
    if len(inside) < 2 or inside[-1] <= inside[0]:
        return float("nan")
    return (len(inside) - 1) / (inside[-1] - inside[0])


def _viewer(run_dir: Path, events: EventsFile, root: Path, slice_s: float, warm_s: float, presses: int) -> dict:
    """Attach a viewer, let it settle, time one slice with it, press keys, detach; the slice's numbers."""
    frame_log = root / f"frames-attach-{uuid.uuid4().hex[:6]}.txt"
    term = PtyProcess([python(), "-m", "tui.cli", "attach", str(run_dir)], size=(120, 40), env=probe_env(frame_log))
    try:
        if term.wait_for(FRAME_MARK, timeout=120.0) is None:
            raise RuntimeError(f"attach showed no frame; output tail {bytes(term.output[-300:])!r}")
        time.sleep(warm_s)
        start, cpu_start = time.time(), cpu_seconds(term.proc.pid)
        time.sleep(slice_s)
        end, cpu_end = time.time(), cpu_seconds(term.proc.pid)
        keys = key_latencies(term, events, presses)
        term.send(b"q")  # the quit modal; d detaches and leaves the engine training
        time.sleep(0.5)
        term.send(b"d")
    finally:
        code = term.close(timeout=20.0)
    if code != 0:
        raise RuntimeError(f"attach exited {code}; output tail {bytes(term.output[-300:])!r}")
    frames = frames_between(frame_log, start, end)
    return {"window": (start, end), "kbps": term.bytes_between(start, end) / 1024 / (end - start),
            "ui_cpu": (cpu_end - cpu_start) / (end - start) * 100, "frames_ms": frames,
            "fps": len(frames) / (end - start), "keys_ms": keys}


def measure(root: Path, pairs: int, slice_s: float, warm_s: float, presses: int, argv=None) -> dict:
    """``pairs`` (bare, viewer) slice pairs, alternating order; steps/s of each slice and the viewer's numbers.

    ``argv(run_dir)``: the headless engine's command (default: the demo preset, bench.dash_probe.train_argv)."""
    run_dir = root / f"slices-{uuid.uuid4().hex[:6]}"
    command = argv(run_dir) if argv else train_argv(1_000_000, run_dir) + ["--headless"]
    with open(os.devnull, "w") as devnull:
        engine = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.DEVNULL,
                                  stdout=devnull, stderr=devnull, env=terminal_env(), start_new_session=True)
    events = EventsFile(run_dir / "events.jsonl")
    bare, viewers = [], []
    try:
        if events.wait_step(WARM_STEPS, TIMEOUT_S, lambda: engine.poll() is None) is None:
            raise RuntimeError(f"the engine did not reach step {WARM_STEPS} (exit {engine.poll()})")
        for i in range(pairs):
            for kind in (("bare", "viewer") if i % 2 == 0 else ("viewer", "bare")):
                if kind == "bare":
                    time.sleep(SETTLE_S)
                    start = time.time()
                    time.sleep(slice_s)
                    bare.append((start, time.time()))
                else:
                    viewers.append(_viewer(run_dir, events, root, slice_s, warm_s, presses))
    finally:
        engine.send_signal(signal.SIGTERM)  # checkpoint and stop
        try:
            engine.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(engine.pid, signal.SIGKILL)
            engine.wait(10)
    events.read()
    return {"bare": [rate_between(events.steps, *w) for w in bare],
            "viewer": [rate_between(events.steps, *v["window"]) for v in viewers],
            "kbps": [v["kbps"] for v in viewers], "ui_cpu": [v["ui_cpu"] for v in viewers],
            "frames_ms": [f for v in viewers for f in v["frames_ms"]], "fps": [v["fps"] for v in viewers],
            "keys_ms": [k for v in viewers for k in v["keys_ms"]]}
