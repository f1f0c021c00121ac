"""Each measurement of bench.long_runs on one run: open it, follow it live, convert it. Results are plain dicts
(bench.long_runs.section makes the page from them).

- ``open_finished``: ``repeat`` opens of a finished run, each a fresh `attach` process: seconds (and viewer CPU)
  to the first full frame, the steady RSS over ``hold_s`` after it and the peak (VmHWM); on the last open, the
  zoom and pan keys (``zoom_keys``), each key's frame time from the app's frame log.
- ``open_live``: a writer process (bench.long_runs.live) appending to the run at ``rate`` steps a second while
  a viewer follows it for ``seconds`` (or ``steps`` steps) after its first frame: RSS through it, and the lag
  (seconds between a step reaching the record and the viewer showing it), sampled from the screen four times a
  second.
- ``convert_direct``: engine.run.steps.convert on an old run in a fresh process (wall, CPU, peak RSS).
- ``open_old``: the viewer on an old run (it converts the log, or reads it): first frame, RSS, whether the
  status line showed the conversion's bar, and when the record was complete.
- ``envelope_reads``: the record reads one frame of a random window costs (engine.run.steps envelope).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import ROOT, Periodic
from bench.long_runs.viewer import (
    RssSampler,
    Viewer,
    braille_cells,
    conversion_bar,
    frames,
    full_frame,
    key_frame_s,
    shown_step,
)
from engine.run.steps import needs_conversion, open_record, record_dir

#: Seconds between two looks at the screen's step while a live run is followed.
LAG_EVERY_S = 0.25
#: Pixel columns of a chart at 120×40 (two braille dots per character cell), for the record's envelope reads.
CHART_COLUMNS = 110
#: The series a frame of the default dashboard draws.
FRAME_SERIES = ("loss", "components.mse", "grad_norm")


def reads_record() -> bool:
    """Whether the viewer in this tree reads the step record (it imports engine.run.steps somewhere in tui/);
    an older viewer reads every step from events.jsonl."""
    return any("engine.run.steps" in path.read_text(encoding="utf-8") for path in (ROOT / "tui").rglob("*.py"))


def zoom_keys() -> tuple[str, ...] | None:
    """tmux names of the dashboard's zoom and pan keys when it has them (a binding whose action zooms), else
    None (the old viewer's only view change is h: recent ↔ full history)."""
    from tui.screens.dashboard import KEYS

    actions = " ".join(binding.action for binding in KEYS)
    return ("+", "-", "Left", "Right") if "zoom" in actions else None


def _key_sequence(count: int, keys: tuple[str, ...] | None, seed: int) -> list[str]:
    """``count`` keys that move to random windows: the whole run (h), then zoom in 3-12 times and pan at random,
    zooming out now and then; or h again and again for a viewer without zoom."""
    if keys is None:
        return ["h"] * count
    rng = random.Random(seed)
    zoom_in, zoom_out, left, right = keys
    out = ["h"] + [zoom_in] * rng.randint(3, 12)
    while len(out) < count:
        out.append(rng.choice([left, left, right, zoom_in, zoom_out]))
    return out[:count]


def _press(viewer: Viewer, keys: list[str]) -> list[float]:
    """Send each key once the screen has answered the one before (or 3 s passed); time.time() of each send."""
    sent = []
    for key in keys:
        before = viewer.screen()
        sent.append(viewer.send(key))
        deadline = time.monotonic() + 3.0
        while viewer.screen() == before and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.25)
    return sent


def one_open(run: Path, last_step: int, hold_s: float, cap_mib: float, timeout_s: float, keys: list[str],
             frame_log: Path) -> dict:
    """One fresh viewer on a finished run (module docstring)."""
    viewer = Viewer(run, frame_log)
    sampler = RssSampler(viewer, cap_mib).start()
    sent: list[float] = []
    try:
        first, text = viewer.wait_for(lambda screen: full_frame(screen, last_step), timeout_s)
        cpu = viewer.cpu_s()
        if first is not None:
            time.sleep(hold_s)
            sent = _press(viewer, keys) if keys else []
        steady = sampler.since((first or 0) + hold_s / 2) if first is not None else []
        peak = viewer.peak_mib()
    finally:
        sampler.stop()
        viewer.close()
    log = frames(frame_log)
    frame_log.unlink(missing_ok=True)
    until = [*sent[1:], float("inf")]
    return {"first_s": first, "cpu_s": cpu, "steady_mib": statistics.median(steady) if steady else None,
            "peak_mib": max(peak or 0.0, sampler.peak), "capped_at": sampler.capped_at, "screen": text,
            "keys": [(key, key_frame_s(log, at, end)) for key, at, end in zip(keys, sent, until)]}


def open_finished(run: Path, last_step: int, repeat: int, hold_s: float, cap_mib: float, timeout_s: float,
                  key_count: int, warm: bool, scratch: Path) -> dict:
    """``repeat`` measured opens (after one unmeasured warm-up open when ``warm``); the keys on the last one. An
    open that shows no frame (the viewer capped or hung) ends the series."""
    keys = _key_sequence(key_count, zoom_keys(), seed=last_step)
    if warm:
        one_open(run, last_step, 0.5, cap_mib, timeout_s, [], scratch / "frames-warm.txt")
    opens: list[dict] = []
    for i in range(repeat):  # (stopped at an open that never showed its frame: a capped or hung viewer)
        opens.append(one_open(run, last_step, hold_s, cap_mib, timeout_s, keys if i == repeat - 1 else [],
                              scratch / f"frames-{i}.txt"))
        if opens[-1]["first_s"] is None:
            break
    return {"opens": opens, "keys": opens[-1]["keys"], "zoom": zoom_keys() is not None}


def start_writer(run: Path, steps: int, rate: float) -> subprocess.Popen:
    """bench.long_runs.live appending ``steps`` steps to ``run``; returns once its first step is out."""
    writer = subprocess.Popen([sys.executable, "-m", "bench.long_runs.live", str(run), "--steps", str(steps),
                               "--rate", str(rate)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = writer.stdout.readline()
    if not line.startswith("started"):
        writer.kill()
        raise RuntimeError(f"the live writer did not start: {line!r}")
    return writer


def stop_writer(writer: subprocess.Popen) -> float | None:
    """Stop the writer (SIGTERM: it finishes the run) and return the rate it achieved, steps a second."""
    if writer.poll() is None:
        writer.terminate()
    out, _ = writer.communicate(timeout=60)
    found = re.search(r"done \d+ ([\d.]+)", out or "")
    return float(found.group(1)) if found else None


class RecordWatch(Periodic):
    """The record's last step every ``interval`` seconds, on a thread, from ``start()`` to ``stop()``: when each
    step reached the record (the writer's commits), against which the screen's step is timed."""

    thread_name = "record-watch"

    def __init__(self, run: Path, interval: float = 0.05) -> None:
        super().__init__(interval)
        self.record = open_record(run)
        #: (time.perf_counter(), the record's last step) per sample.
        self.samples: list[tuple[float, int]] = []

    @property
    def last(self) -> int:
        return self.samples[-1][1] if self.samples else 0

    def sample(self) -> None:
        self.record.refresh()
        self.samples.append((time.perf_counter(), self.record.last_step or 0))


def follow(viewer: Viewer, watch: RecordWatch, writer: subprocess.Popen, seconds: float | None = None,
           steps: int | None = None) -> dict:
    """The screen's step every LAG_EVERY_S for ``seconds``, or until ``steps`` more steps reached the record (or
    the writer or the viewer ended); the lag of each look (lag_series) and the steps the viewer followed."""
    start_step = watch.last
    screens: list[tuple[float, int | None]] = []
    end = time.perf_counter() + seconds if seconds is not None else float("inf")
    while time.perf_counter() < end and (steps is None or watch.last - start_step < steps) and \
            writer.poll() is None and viewer.alive():
        screens.append((time.perf_counter(), shown_step(viewer.screen())))
        time.sleep(LAG_EVERY_S)
    return {"lags": lag_series(watch.samples, screens), "lag_samples": len(screens),
            "followed": watch.last - start_step}


def lag_series(written: list[tuple[float, int]], screens: list[tuple[float, int | None]]) -> list[float]:
    """Per look at the screen, seconds since the step it shows reached the record: when the record's last step
    passed it, interpolated between two samples of the record (0 when the screen is as new as the record at that
    moment; a look that shows no step, or a step the record had before it was first sampled, is left out)."""
    lags = []
    for now, shown in screens:
        known = [(at, step) for at, step in written if at <= now]
        if shown is None or not known or shown < written[0][1]:
            continue
        if shown >= known[-1][1]:
            lags.append(0.0)
            continue
        after = next(i for i, (_, step) in enumerate(known) if step >= shown)
        (t1, s1), (t0, s0) = known[after], known[max(after - 1, 0)]
        reached = t1 if s1 == s0 else t0 + (t1 - t0) * (shown - s0) / (s1 - s0)
        lags.append(max(0.0, now - reached))
    return lags


def open_live(run: Path, rate: float, cap_mib: float, timeout_s: float, seconds: float | None = None,
              steps: int | None = None) -> dict:
    """A viewer following ``run`` while a writer appends at ``rate`` steps a second: for ``seconds`` after the
    viewer's first frame, or until ``steps`` steps were appended after it (module docstring). The writer is
    given more steps than that (its total on screen is never reached) and stopped when the viewer has seen them."""
    writer = start_writer(run, (steps or 0) + int(rate * ((seconds or 0) + timeout_s + 60)), rate)
    watch = RecordWatch(run).start()
    viewer = Viewer(run)
    sampler = RssSampler(viewer, cap_mib).start()
    followed = {"lags": [], "lag_samples": 0, "followed": 0}
    try:
        first, _ = viewer.wait_for(lambda text: shown_step(text) is not None and braille_cells(text) >= 24,
                                   timeout_s)
        if first is not None:
            followed = follow(viewer, watch, writer, seconds, steps)
        peak = viewer.peak_mib()
    finally:
        sampler.stop()
        viewer.close()
        watch.stop()
        achieved = stop_writer(writer)
    return {"first_s": first, "rss": sampler.since(first or 0.0), "samples": sampler.samples,
            "peak_mib": max(peak or 0.0, sampler.peak), "capped_at": sampler.capped_at, "rate": achieved,
            "seconds": seconds, **followed}


CONVERT = """
import json, resource, sys, time
from engine.run.steps import convert
calls = []
start, cpu = time.perf_counter(), time.process_time()
convert(sys.argv[1], progress=lambda done, total: calls.append(done))
print(json.dumps({"wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu, "calls": len(calls),
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def convert_direct(run: Path) -> dict:
    """engine.run.steps.convert of ``run``'s log in a fresh process; its record is removed afterwards."""
    shutil.rmtree(record_dir(run), ignore_errors=True)
    done = subprocess.run([sys.executable, "-c", CONVERT, str(run)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=3600)
    shutil.rmtree(record_dir(run), ignore_errors=True)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def open_old(run: Path, last_step: int, hold_s: float, cap_mib: float, timeout_s: float) -> dict:
    """The viewer on a run from before the record: first frame, RSS, the conversion's bar and end (module
    docstring), the steady RSS over ``hold_s`` after the run's last step is on screen. A viewer that reads the
    log itself converts nothing: then only the open is timed."""
    shutil.rmtree(record_dir(run), ignore_errors=True)
    converts = reads_record()
    viewer = Viewer(run)
    sampler = RssSampler(viewer, cap_mib).start()
    first = done = None
    bars = 0
    try:
        while time.perf_counter() - viewer.started < timeout_s and viewer.alive():
            text = viewer.screen()
            now = time.perf_counter() - viewer.started
            bars += conversion_bar(text)
            if first is None and shown_step(text) is not None and braille_cells(text) >= 24:
                first = now
            if done is None and converts and (record_dir(run) / "step.i8").exists() and not needs_conversion(run):
                done = now
            if first is not None and (done is not None or not converts):
                break
            time.sleep(0.1)
        full, _ = viewer.wait_for(lambda text: full_frame(text, last_step), timeout_s)
        if full is not None:
            time.sleep(hold_s)
        peak = viewer.peak_mib()
    finally:
        sampler.stop()
        viewer.close()
    steady = sampler.since(full + hold_s / 2) if full is not None else []
    return {"first_s": first, "full_s": full, "converted_s": done, "bar_screens": bars, "converts": converts,
            "steady_mib": statistics.median(steady) if steady else None, "peak_mib": max(peak or 0.0, sampler.peak),
            "capped_at": sampler.capped_at}


def envelope_reads(run: Path, windows: int, seed: int) -> list[float]:
    """Seconds of the record reads one frame of a random window costs: the envelope of each FRAME_SERIES over
    CHART_COLUMNS columns, from a fresh open (a window from a single step's width up to the whole run)."""
    record = open_record(run)
    lo, hi = record.first_step, record.last_step
    rng = random.Random(seed)
    out = []
    for _ in range(windows):
        span = max(8, int((hi - lo) * rng.random() ** 4))
        left = rng.randint(lo, max(lo, hi - span))
        start = time.perf_counter()
        for name in FRAME_SERIES:
            record.envelope(name, left, left + span, CHART_COLUMNS)
        out.append(time.perf_counter() - start)
    return out


def cached_bytes(run: Path) -> int | None:
    """Bytes of the run's files in the page cache now (util-linux fincore), None without it."""
    files = [str(path) for path in run.rglob("*") if path.is_file()]
    if not files or shutil.which("fincore") is None:
        return None
    done = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES", *files],
                          capture_output=True, text=True)
    return sum(int(line) for line in done.stdout.split() if line.isdigit())
