"""How fast a viewer opens a long run and sees new events: `python -m bench.open_run [--steps N]`.

Writes a synthetic run directory whose events.jsonl holds N step events (in
the byte format ``events.to_json`` writes, toy-task shaped, with an eval,
memory and system sample every 100 steps), then measures, each best of
``--repeat``:

- open: ``read_history`` over the whole file (the msgspec decode in
  engine.run.history.store), next to plain ``events.from_json`` per line on the
  first 100,000 lines, scaled (the naive way; too slow to run on all of them),
  and the open without the step lines (``steps=False``: what a viewer reading
  the run's step record decodes);
- materialise: iterating every event as an object (what a viewer pays if it
  asks for objects instead of ``History.column``);
- memory: the reader's peak and what the History keeps (tracemalloc);
- first live event: a line appended by another thread until ``poll()``
  returns it (the follower polls the file every ``POLL_INTERVAL_S``).

Wall and CPU seconds are both printed: on a shared machine CPU time is the
fair number. Results print as plain lines; as a suite module (``run``) it
returns a Section for docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

from bench.common import Section, fmt_stats, smoke
from engine.run import events as ev
from engine.run.control.client import POLL_INTERVAL_S, RunClient
from engine.run.history import read_history

_STEP = ('{{"type":"step","t":{t!r},"step":{step},"epoch":{epoch},"loss":{loss!r},"lr":{lr!r},'
         '"grad_norm":{gn!r},"samples_per_s":{sps!r},"steps_per_s":{stps!r},"batch_size":32,'
         '"components":{{"mse":{loss!r}}},"skipped":false}}')


def write_run(root: Path, steps: int, seed: int = 0) -> Path:
    """A run directory with ``steps`` step events (plus a few others) in events.jsonl, in the form of a run from
    before the step record (schema 2: every step a line, no ``steps/``); returns the file."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    path = root / "events.jsonl"
    t0 = 1.7e9
    with open(path, "w", encoding="utf-8") as out:
        out.write(ev.to_json(ev.Schema(t=t0, version=2)) + "\n")  # every step a line: the schema before the record
        out.write(ev.to_json(ev.RunStarted(t=t0, name=root.name, task="toy", total_steps=steps)) + "\n")
        lines = []
        for step in range(1, steps + 1):
            loss = 0.25 * math.exp(-step / steps) + rng.random() * 1e-3
            lines.append(_STEP.format(t=t0 + step * 0.01, step=step, epoch=step // 10_000, loss=loss,
                                      lr=1e-3 * min(1.0, step / 1000), gn=rng.random(), sps=3000.0 + rng.random(),
                                      stps=100.0 + rng.random()))
            if step % 100 == 0:
                lines.append(ev.to_json(ev.MemorySampled(t=t0 + step * 0.01, step=step, allocated=step * 4096,
                                                         peak=step * 8192, source="torch")))
                lines.append(ev.to_json(ev.SystemSampled(t=t0 + step * 0.01, cpu_percent=rng.random() * 100,
                                                         ram_used=2 ** 33, ram_total=2 ** 35)))
            if step % 10_000 == 0:
                lines.append(ev.to_json(ev.EvalDone(t=t0 + step * 0.01, step=step, val_loss=loss,
                                                    metrics={"val_loss": loss, "psnr_db": 20.0},
                                                    primary="psnr_db")))
            if len(lines) >= 50_000:
                out.write("\n".join(lines) + "\n")
                lines = []
        if lines:
            out.write("\n".join(lines) + "\n")
    (root / "status.json").write_text(json.dumps({"pid": 0, "host": "bench", "state": "finished", "heartbeat": t0}))
    return path


def _best(fn, repeat: int) -> tuple[float, float, object]:
    """Best wall-clock and CPU seconds of ``repeat`` calls (CPU time is what a loaded box can't inflate)."""
    best, best_cpu, result = float("inf"), float("inf"), None
    for _ in range(repeat):
        start, cpu = time.perf_counter(), time.process_time()
        result = fn()
        best = min(best, time.perf_counter() - start)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return best, best_cpu, result


def first_live_event(root: Path, trials: int = 20) -> list[float]:
    """Seconds from an append (by another thread) to ``poll()`` returning it, per trial."""
    client = RunClient(root, read_only=True)
    client.history()
    path = root / "events.jsonl"
    latencies = []
    for i in range(trials):
        appended = threading.Event()
        stamp = [0.0]

        def writer(i: int = i, stamp: list[float] = stamp, appended: threading.Event = appended) -> None:
            time.sleep(0.005 + 0.003 * (i % 7))  # land at varying points of the poll cycle
            with open(path, "a", encoding="utf-8") as out:
                out.write(ev.to_json(ev.Warning(text=f"bench {i}")) + "\n")
                out.flush()
                stamp[0] = time.perf_counter()
            appended.set()

        thread = threading.Thread(target=writer)
        thread.start()
        got = []
        while not got:
            got = client.poll(timeout=2.0)
        latencies.append(time.perf_counter() - stamp[0])
        thread.join()
    client.close()
    return latencies


def run(quick: bool = False) -> Section:
    """Suite entry: 1M steps, best of 3 (--quick: 100k, best of 1; smoke: 2,000)."""
    steps, repeat, trials = (2_000, 1, 3) if smoke() else (100_000, 1, 10) if quick else (1_000_000, 3, 20)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "bench-run"
        size = write_run(root, steps).stat().st_size
        events = root / "events.jsonl"
        open_s, open_cpu, history = _best(lambda: read_history(events), repeat)
        n = len(history)
        warm_s, warm_cpu, _ = _best(lambda: read_history(events, steps=False), repeat)
        tracemalloc.start()
        kept = read_history(events)
        current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del kept
        with open(root / "events.jsonl", "rb") as handle:
            head = [next(handle) for _ in range(min(100_000, n))]
        _, naive_cpu, _ = _best(lambda: [ev.from_json(line) for line in head], 1)
        naive_total = naive_cpu / len(head) * n
        mat_s, mat_cpu, _ = _best(lambda: sum(1 for _ in history), 1)
        live = [t * 1e3 for t in first_live_event(root, trials)]
    body = "\n".join([
        f"Synthetic run: {steps:,} step events ({n:,} events, {size / 2**20:.0f} MiB of events.jsonl); best of "
        f"{repeat}; wall and CPU seconds of this process.", "",
        "| what | wall s | CPU s | per event |", "|---|---:|---:|---:|",
        f"| open: `read_history` (msgspec) | {open_s:.2f} | {open_cpu:.2f} | "
        f"{open_cpu / n * 1e6:.2f} µs CPU |",
        f"| open without the step lines (`steps=False`) | {warm_s:.2f} | {warm_cpu:.2f} | "
        f"{warm_cpu / n * 1e6:.2f} µs CPU |",
        f"| naive `events.from_json` per line (first {len(head):,} lines, scaled) | – | {naive_total:.1f} | "
        f"{naive_cpu / len(head) * 1e6:.2f} µs CPU |",
        f"| materialise every event as an object | {mat_s:.2f} | {mat_cpu:.2f} | {mat_cpu / n * 1e6:.2f} µs CPU |",
        "", f"- naive ÷ msgspec open (CPU): **{naive_total / open_cpu:.1f}×**",
        f"- reader memory: peak {peak / 2**20:.0f} MiB while opening, {current / 2**20:.0f} MiB kept "
        f"({current / n:.0f} B/event) (tracemalloc)",
        f"- first live event after an append (another thread): {fmt_stats(live, '.1f')} ms over {trials} appends; "
        f"poll interval {POLL_INTERVAL_S * 1e3:.0f} ms",
    ])
    return Section("Channel: opening a long run and following it",
                   f"python -m bench --only open_run{' --quick' if quick else ''}", body)


def main(argv: list[str] | None = None) -> int:
    """Build the synthetic run, time opening and following it, print the numbers."""
    parser = argparse.ArgumentParser(prog="python -m bench.open_run", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000, help="step events in the synthetic run")
    parser.add_argument("--repeat", type=int, default=2, help="best of this many opens")
    parser.add_argument("--dir", type=Path, default=None, help="where to write the run (default a temp dir)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp) / "bench-run"
        start = time.perf_counter()
        path = write_run(root, args.steps)
        size = path.stat().st_size
        print(f"wrote {args.steps:,} step events, {size / 2**20:.0f} MiB in {time.perf_counter() - start:.1f} s")

        open_s, open_cpu, history = _best(lambda: read_history(root / "events.jsonl"), args.repeat)
        steps = history.count_type("step")
        n = len(history)
        print(f"open (history): {open_s:.2f} s wall, {open_cpu:.2f} s CPU for {n:,} events ({steps:,} steps) "
              f"= {open_cpu / n * 1e6:.2f} us CPU/event")
        tracemalloc.start()  # numpy reports its buffers to tracemalloc: this is the reader's own peak
        kept = read_history(root / "events.jsonl")
        current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"memory: peak {peak / 2**20:.0f} MiB while opening, {current / 2**20:.0f} MiB kept "
              f"({current / len(kept):.0f} B/event; the file is {size / 2**20:.0f} MiB)")
        del kept
        loss_s, _, loss = _best(lambda: history.column("step", "loss"), 1)
        print(f"column('step', 'loss'): {loss_s * 1e3:.1f} ms, {len(loss):,} values")

        sample = 100_000
        with open(path, "rb") as handle:
            head = [next(handle) for _ in range(min(sample, n))]
        _, naive_cpu, _ = _best(lambda: [ev.from_json(line) for line in head], 1)
        naive_total = naive_cpu / len(head) * n
        print(f"naive from_json per line: {naive_cpu / len(head) * 1e6:.2f} us CPU/event, {naive_total:.1f} s CPU "
              f"projected for the whole file ({naive_total / open_cpu:.1f}x the open)")

        mat_s, mat_cpu, _ = _best(lambda: sum(1 for _ in history), 1)
        print(f"materialise every event as an object: {mat_s:.2f} s wall, {mat_cpu:.2f} s CPU "
              f"({mat_cpu / n * 1e6:.2f} us CPU/event)")

        lat = sorted(first_live_event(root))
        print(f"first live event after an append: median {lat[len(lat) // 2] * 1e3:.1f} ms, "
              f"max {lat[-1] * 1e3:.1f} ms over {len(lat)} appends (poll interval {POLL_INTERVAL_S * 1e3:.0f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
