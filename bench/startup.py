"""Start-up: `sensorlm-tui --help`, and the dashboard's first frame vs torch's import: `python -m bench.startup`.

1. ``sensorlm-tui --help`` (the console script), interleaved with ``python -c
   pass`` (the interpreter's floor) and ``python -c "import torch"`` (what the
   CLI must not pay): wall and CPU seconds of each child. Goal < 1 s.
2. ``sensorlm-tui train`` (demo, 2 steps) in a 120×40 pseudo-terminal, both
   engine modes: seconds from spawning it to the first full frame on the
   terminal (the cursor move to its last row has arrived) and to the
   moment ``import torch`` completes in whichever process imports it (engine
   process, or the dashboard's worker with ``--in-process``), recorded by the
   probe in bench/hooks/sitecustomize.py. Goal: the frame comes first.
3. In the same starts: seconds from spawning ``sensorlm-tui train`` to the
   first start-up phase on the terminal (its name written by the app:
   "reading the config" from a launched engine, "importing torch" from the
   in-process trainer). Goal < 1 s: the user sees what the engine does from
   its first instant, not a blank "connecting…".
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from bench.common import ROOT, Section, fmt_stats, interleave, python, ratios, smoke, standalone, stats, verdict
from bench.dash_probe import FRAME_MARK
from bench.pty_run import PtyProcess, terminal_env
from bench.run_events import EventsFile

HOOKS = ROOT / "bench" / "hooks"
GOAL_HELP_S = 1.0
GOAL_FIRST_PHASE_S = 1.0
#: What the first phase on screen says, per engine mode (engine.app.startup).
FIRST_PHASES = (b"reading the config", b"importing torch")


def _cli() -> list[str]:
    """The installed console script, or the module when it is not on PATH next to this interpreter."""
    script = Path(python()).parent / "sensorlm-tui"
    return [str(script)] if script.exists() else ([shutil.which("sensorlm-tui")] if shutil.which("sensorlm-tui")
                                                  else [python(), "-m", "tui.cli"])


def child_times(argv: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one child process run to completion (CPU from its rusage: user + system)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv} exited {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def help_times(repeats: int, with_torch: bool = True) -> dict[str, list[tuple[float, float]]]:
    """Interleaved (wall, CPU) of --help, the bare interpreter and (``with_torch``) import torch."""
    variants = {"sensorlm-tui --help": lambda: child_times(_cli() + ["--help"]),
                "python -c pass": lambda: child_times([python(), "-c", "pass"])}
    if with_torch:
        variants["python -c 'import torch'"] = lambda: child_times([python(), "-c", "import torch"])
    return interleave(variants, repeats)


def first_of(term: PtyProcess, needles: tuple[bytes, ...], timeout: float) -> float | None:
    """time.time() when the earliest of ``needles`` arrived on the terminal (None when none did in time)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = [t for t in (term.wait_for(needle, timeout=0.02) for needle in needles) if t is not None]
        if seen:
            return min(seen)
    return None


def first_frame(in_process: bool, root: Path) -> dict:
    """Seconds from spawn to the first frame and to torch's import end, for one dashboard start."""
    run_dir = root / f"start-{uuid.uuid4().hex[:6]}"
    mark = root / f"torch-{uuid.uuid4().hex[:6]}.txt"
    env = terminal_env({"BENCH_TORCH_MARK": str(mark)})
    env["PYTHONPATH"] = str(HOOKS) + os.pathsep + env["PYTHONPATH"]
    argv = _cli() + ["train", "--preset", "demo", "--max-steps", "2", "--eval-every", "0", "--checkpoint-every", "0",
                     "--threads", "1", "--set", "sensorlm.data.val_samples=16", "--run-dir", str(run_dir)]
    argv += ["--in-process"] if in_process else []
    term = PtyProcess(argv, size=(120, 40), env=env)
    alive = lambda: term.proc.poll() is None  # noqa: E731
    try:
        frame = term.wait_for(FRAME_MARK, timeout=120.0)
        phase = first_of(term, FIRST_PHASES, timeout=60.0)
        events = EventsFile(run_dir / "events.jsonl")
        events.wait_finished(300.0, alive)
        for _ in range(5):
            if not alive():
                break
            term.send(b"q")
            time.sleep(1.0)
    finally:
        term.close(timeout=30.0)
    lines = mark.read_text().split() if mark.exists() else []
    if frame is None or phase is None or len(lines) < 3:
        raise RuntimeError(f"no first frame, phase or torch import seen (frame={frame}, phase={phase}, "
                           f"mark={lines}); output tail {bytes(term.output[-300:])!r}")
    return {"frame": frame - term.started, "phase": phase - term.started,
            "torch_start": float(lines[1]) - term.started, "torch_end": float(lines[2]) - term.started}


def run(quick: bool = False) -> Section:
    """Suite entry: --help × 10 and 3 starts per mode (quick: 3 and 1; smoke: 1 and none)."""
    help_repeats, starts = (1, 0) if smoke() else (3, 1) if quick else (10, 3)
    helps = help_times(help_repeats, with_torch=not smoke())
    lines = ["| command | wall s | CPU s |", "|---|---:|---:|"]
    for name, values in helps.items():
        lines.append(f"| `{name}` | {fmt_stats([w for w, _ in values], '.2f')} | "
                     f"{fmt_stats([c for _, c in values], '.2f')} |")
    help_wall = [w for w, _ in helps["sensorlm-tui --help"]]
    floor = [w for w, _ in helps["python -c pass"]]
    lines.append(f"| `--help` − bare interpreter (wall) | {fmt_stats([a - b for a, b in zip(help_wall, floor)], '.2f')}"
                 " | |")
    verdicts = [verdict("`sensorlm-tui --help` wall", stats(help_wall)[1], GOAL_HELP_S, False, " s"),
                verdict("`sensorlm-tui --help` CPU", stats([c for _, c in helps["sensorlm-tui --help"]])[1],
                        GOAL_HELP_S, False, " s")]
    if starts:
        with tempfile.TemporaryDirectory(prefix="bench-start-") as tmp:
            modes = interleave({"engine process": lambda: first_frame(False, Path(tmp)),
                                "--in-process": lambda: first_frame(True, Path(tmp))}, starts)
        lines += ["", "| dashboard start (120×40 pty) | first frame s | first phase on screen s | torch import "
                  "starts s | torch import done s | frame ÷ torch done |", "|---|---:|---:|---:|---:|---:|"]
        for name, rows in modes.items():
            frame, done = [r["frame"] for r in rows], [r["torch_end"] for r in rows]
            phase = [r["phase"] for r in rows]
            lines.append(f"| {name} | {fmt_stats(frame, '.2f')} | {fmt_stats(phase, '.2f')} | "
                         f"{fmt_stats([r['torch_start'] for r in rows], '.2f')} | {fmt_stats(done, '.2f')} | "
                         f"{fmt_stats(ratios(frame, done), '.2f')} |")
            verdicts.append(verdict(f"first frame ÷ torch import done ({name})", stats(ratios(frame, done))[2], 1.0,
                                    higher_is_better=False, unit="× (worst)"))
            verdicts.append(verdict(f"launch → first phase on screen ({name})", stats(phase)[2], GOAL_FIRST_PHASE_S,
                                    higher_is_better=False, unit=" s (worst)"))
    body = "\n".join(lines) + "\n\n" + (
        f"Median (min–max) over {help_repeats} interleaved round(s) for the commands, {starts} per dashboard mode; "
        "seconds since the process was spawned. CPU s is the child's own user + system time (on a loaded box "
        "the fairer number). `torch import` times come from a sitecustomize probe (bench/hooks) in the process "
        "that imports it.")
    return Section("Start-up", f"python -m bench --only startup{' --quick' if quick else ''}", body, verdicts)


def main() -> None:
    """Command line: print the section."""
    standalone(run, __doc__)


if __name__ == "__main__":
    main()
