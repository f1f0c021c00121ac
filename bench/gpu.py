"""`python -m bench --gpu`: the GPU truth in one short script (≤ 8 minutes on one GPU) that keeps what it measured.

Without CUDA it says so in one line and exits 0. With a GPU, each row runs in
a fresh process (bench.gpu_probe: a clean CUDA context, so one row's cached
memory never shows up in the next) under a limit: its own, cut to what is
left of the script's budget. GPU time is scarce and a run can be cut at any
point (the budget, ``timeout``, a lost machine), so the script is shaped
around keeping rows, not around finishing:

* each row is printed as one line the moment it is measured and appended to
  a JSON-lines file beside the page (``docs/BENCHMARKS-gpu.jsonl``; a run
  starts with a ``run`` record naming the device);
* a row that fails, times out or finds the budget spent is an error row, not
  a lost run; a probe killed at its limit leaves the last row it printed
  (the baselines print one after every round), marked cut;
* SIGTERM or Ctrl-C ends the run where it is, stops the probe (its process
  group) and still writes the page's section from the rows that exist,
  saying where it was cut; ``--from-log`` rebuilds that section from the
  JSON-lines file when even that was lost (SIGKILL).

Rows, in order of value if time runs out (every one a ratio or an error
against the truth): memory (every task: SensorLM at several backends and
batches, the toy, the LM at seq 256, 512 and 1024 in full and LoRA, the
gap-filler, any plug-in task), a real CUDA OOM recovered, the gauges against
nvidia-smi, the fair baselines on the GPU, speed (steps/s, GPU idle %, MFU), a
live autotune from a poor start under a tight budget (bench.autotune_gpu), the
compiled and sync-free rows (bench.gpu_compile), fast steps against a bare loop
(bench.engine_overhead_fast), bf16 and fp16 steps that learn, every
``gpu``-marked test, and the dashboard attached ÷ alone (slices).
bench.gpu_section renders the page's section.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from bench import gpu_compile
from bench.common import ROOT

#: The whole script's budget and each probe's default limit (seconds).
BUDGET_S = 8 * 60
PROBE_S = 150
#: After its limit a probe gets SIGTERM (it stops its own children) and this long before SIGKILL.
GRACE_S = 10.0
#: The probe process, as a command prefix (a test hands in a fake).
PROBE = (sys.executable, "-m", "bench.gpu_probe")
#: Where each row is appended as it is measured, beside the page.
LOG = ROOT / "docs" / "BENCHMARKS-gpu.jsonl"
PAGE = ROOT / "docs" / "BENCHMARKS.md"
#: The groups of rows, in the order they run and appear on the page.
GROUPS = ("memory", "oom", "gauges", "baselines", "speed", "autotune", "compile", "fast", "precision", "tests",
          "slices")

#: (label, task, preset, overrides) for the memory rows; other installed tasks are added at their defaults.
MEMORY_ROWS = [
    ("demo b16 sdpa", "sensorlm", "demo", {"train": {"batch_size": 16}}),
    ("demo b64 sdpa", "sensorlm", "demo", {"train": {"batch_size": 64}}),
    ("demo b16 math", "sensorlm", "demo", {"train": {"batch_size": 16}, "model": {"attn_backend": "math"}}),
    ("demo b16 chunked c8", "sensorlm", "demo",
     {"train": {"batch_size": 16}, "model": {"attn_backend": "chunked", "attn_chunk": 8}}),
    ("base b2 sdpa bf16", "sensorlm", "base", {"train": {"batch_size": 2}}),
    ("base b8 sdpa bf16", "sensorlm", "base", {"train": {"batch_size": 8}}),
    ("toy b32", "toy", "demo", {"train": {"batch_size": 32}}),
    ("lm demo b8 seq512 full", "lm", "demo", {"train": {"batch_size": 8}, "lm": {"seq_len": 512}}),
    ("lm demo b16 seq256 lora", "lm", "demo",
     {"train": {"batch_size": 16}, "lm": {"seq_len": 256, "finetune": "lora"}}),
    ("lm demo b8 seq1024 full", "lm", "demo", {"train": {"batch_size": 8}, "lm": {"seq_len": 1024}}),
    ("lm demo b8 seq512 bf16", "lm", "demo",
     {"train": {"batch_size": 8}, "runtime": {"precision": "bf16"}, "lm": {"seq_len": 512}}),
    ("gapfill b32", "gapfill", "", {"train": {"batch_size": 32}}),
]


@dataclass(frozen=True)
class Row:
    """One row to measure: its group and label, the probe kind and arguments, its limit and the least time
    worth starting it with (a baselines round needs a minute; less measures nothing)."""

    group: str
    label: str
    kind: str
    kwargs: dict = field(default_factory=dict)
    limit: float = PROBE_S
    least: float = 10.0


def other_tasks() -> list[tuple[str, str, str, dict]]:
    """A memory row for every installed task the table does not cover, at its default preset."""
    from engine.core.registry import task_names

    covered = {task for _, task, _, _ in MEMORY_ROWS}
    return [(f"{name} (default preset)", name, "", {}) for name in task_names() if name not in covered]


def rows() -> list[Row]:
    """Every row, in order of what matters most if time runs out (module docstring)."""
    demo = {"task": "sensorlm", "preset": "demo", "overrides": {}}
    out = []
    for label, task, preset, overrides in MEMORY_ROWS + other_tasks():
        # 8 validation samples: the probe's start-up eval is not what is measured, and GPU minutes are few.
        light = {**overrides, "data": {**overrides.get("data", {}), "val_samples": 8}}
        out.append(Row("memory", label, "memory", {"task": task, "preset": preset or None, "overrides": light}))
    out += [Row("oom", "OOM recovery", "oom", demo),
            Row("gauges", "gauges vs nvidia-smi", "gauges", demo),
            Row("baselines", "fair baselines", "baselines", {"rounds": 3}, limit=200, least=60),
            Row("speed", "base b8 bf16", "speed", {"task": "sensorlm", "preset": "base",
                                                   "overrides": {"train": {"batch_size": 8}}, "steps": 120}),
            Row("autotune", "base b8 bf16 autotune", "autotune", {"steps": 400, "window": 8}, limit=150, least=60),
            *gpu_compile.rows(Row),
            Row("fast", "fast steps, toy and tiny LoRA LM", "fast", {}, limit=150, least=45),
            Row("precision", "bf16", "precision", {**demo, "precision": "bf16"}),
            Row("precision", "fp16", "precision", {**demo, "precision": "fp16"}),
            Row("tests", "pytest -m gpu", "tests", {}, limit=180),
            Row("slices", "dashboard slices", "slices", {"pairs": 5}, limit=120, least=45)]
    return out


class Clock:
    """The script's deadline: probes get what is left, up to their own limit."""

    def __init__(self, budget_s: float = BUDGET_S) -> None:
        self.budget = budget_s
        self.end = time.monotonic() + budget_s

    def left(self) -> float:
        """Seconds left in the budget."""
        return self.end - time.monotonic()


class Cut(Exception):
    """The run was told to stop (SIGTERM): the rows so far are kept and the page is written from them."""


def parse_row(stdout: str) -> dict:
    """The last JSON line of a probe's output as its row ({"error": …} when there is none)."""
    lines = [line for line in stdout.strip().splitlines() if line.startswith("{")]
    for line in reversed(lines):
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut mid-write by a kill
    return {"error": f"no result line in the probe's output: {stdout[-200:]!r}"}


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the probe's process group (it stops what it started), then SIGKILL what is left after GRACE_S."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def probe(row: Row, clock: Clock, command: tuple[str, ...] = PROBE) -> dict:
    """Run one row's probe process under min(its limit, the budget left): its JSON row, or {"error": why}.

    The probe starts a session of its own, so its children (engines, pytest) are stopped with it. Its output
    goes to a file, not a pipe: a probe cut at its limit, or by SIGTERM to this script, leaves the last row it
    printed, which is kept with ``cut`` saying why.
    """
    timeout = min(row.limit, clock.left())
    if timeout < row.least:
        return {"error": f"skipped: {max(0.0, clock.left()):.0f} s of the {clock.budget:.0f}-s budget left"}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([*command, row.kind, json.dumps(row.kwargs)], cwd=ROOT, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        cut = None
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            cut = f"timed out after {timeout:.0f} s"
            _stop_group(proc)
        except BaseException as exc:  # cut from outside: stop the probe, hand its last row on with the cut
            _stop_group(proc)
            out.seek(0)
            partial = parse_row(out.read())
            exc.row = None if "error" in partial else {**partial, "cut": f"cut by {type(exc).__name__}"}
            raise
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    row_out = parse_row(stdout)
    if cut is not None:
        return {**row_out, "cut": cut} if "error" not in row_out else {"error": cut}
    if proc.returncode != 0 and "error" in row_out:
        tail = (stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"exit {proc.returncode}: {tail[:200]}"}
    return row_out


def one_line(record: dict) -> str:
    """A kept row as the one line printed the moment it is measured."""
    head = f"gpu {record['group']:9} {record['label']:26}"
    if "error" in record:
        return f"{head} error: {record['error']}"
    skip = {"group", "label", "seconds", "cut"}
    parts = []
    for key, value in record.items():
        if key in skip or isinstance(value, (dict, list)):
            continue
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 1 << 20:
            parts.append(f"{key} {value / (1 << 20):,.1f} MiB")
        elif isinstance(value, float):
            parts.append(f"{key} {value:.4g}")
        else:
            parts.append(f"{key} {value}")
    cut = f" [cut: {record['cut']}]" if record.get("cut") else ""
    return f"{head} {', '.join(parts) or 'measured'} ({record.get('seconds', 0):.0f} s){cut}"


class Recorder:
    """Keeps each row the moment it is measured: printed as one line, appended to the JSON-lines log, held."""

    def __init__(self, log: Path, out: Callable[[str], None] = print) -> None:
        self.log = Path(log)
        self.out = out
        self.rows: list[dict] = []

    def start(self, device: str) -> None:
        """The run's first record: which device, when (a log holds many runs; the newest one counts)."""
        self._append({"group": "run", "label": device, "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")})

    def keep(self, row: Row, result: dict, seconds: float) -> dict:
        """Record one measured row; returns the record."""
        record = {"group": row.group, "label": row.label, **result, "seconds": round(seconds, 1)}
        self.rows.append(record)
        self._append(record)
        self.out(one_line(record))
        return record

    def _append(self, record: dict) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, default=str) + "\n")
            fh.flush()
            os.fsync(fh.fileno())  # a machine taken away right after still has the row


def measure(clock: Clock, recorder: Recorder, command: tuple[str, ...] = PROBE) -> dict:
    """Every row in order, each kept as it is measured; the results folded for the page (bench.gpu_section)."""
    for row in rows():
        start = time.monotonic()
        try:
            result = probe(row, clock, command)
        except (Cut, KeyboardInterrupt) as exc:  # the rounds a cut probe finished are kept too
            if getattr(exc, "row", None):
                recorder.keep(row, exc.row, time.monotonic() - start)
            raise
        recorder.keep(row, result, time.monotonic() - start)
    return fold(recorder.rows)


def fold(records: list[dict]) -> dict:
    """Kept rows → {group: row or [rows]} as bench.gpu_section reads them; a group never measured is absent."""
    results: dict = {}
    for record in records:
        group = record["group"]
        if group == "memory":
            results.setdefault("memory", []).append({"config": record["label"], **_body(record)})
        elif group == "precision":
            results.setdefault("precision", []).append({"precision": record["label"], **_body(record)})
        elif group == "compile":
            results.setdefault("compile", []).append(dict(record))
        elif group in GROUPS:
            results[group] = _body(record)
    return results


def _body(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in ("group", "label")}


def read_log(log: Path) -> tuple[str | None, list[dict]]:
    """(device, rows) of the newest run in a JSON-lines log (lines cut by a kill are skipped)."""
    device, records = None, []
    for line in Path(log).read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("group") == "run":
            device, records = record.get("label"), []
        else:
            records.append(record)
    return device, records


@contextlib.contextmanager
def cut_on_sigterm():
    """SIGTERM raises Cut in the main thread for the block (``timeout`` sends it), so the rows are written."""
    def handler(signum, frame):
        raise Cut("SIGTERM")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(device: str, clock: Clock, log: Path = LOG, page: Path | None = PAGE,
        command: tuple[str, ...] = PROBE, out: Callable[[str], None] = print, facts: str | None = None) -> int:
    """Measure every row on ``device``, keeping each; write the page's section from what exists, cut or not.

    ``facts``: the machine line for the page (default bench.common.machine(), which imports torch)."""
    from bench.gpu_section import section

    recorder = Recorder(log, out)
    recorder.start(device)
    started, cut = time.monotonic(), None
    out(f"bench --gpu on {device}: {len(rows())} rows, {clock.budget:.0f}-s budget; rows kept in {log}")
    with cut_on_sigterm():
        try:
            measure(clock, recorder, command)
        except (Cut, KeyboardInterrupt) as exc:
            cut = f"cut by {exc or type(exc).__name__} after {len(recorder.rows)} of {len(rows())} rows"
            out(f"bench --gpu: {cut}; writing the page from the rows kept")
        result = section(device, fold(recorder.rows), time.monotonic() - started, cut=cut)
        for line in result.verdicts:
            out("  " + line)
        if page is not None:
            write_section(page, result, facts)
            out(f"updated {page}")
    return 0


def write_section(page: Path, result, facts: str | None = None) -> None:
    """Merge the GPU section into the results page (its other sections kept)."""
    from bench.common import machine
    from bench.page import merge_page

    text = page.read_text() if page.exists() else "# Benchmarks\n"
    page.write_text(merge_page(text, [result], "python -m bench --gpu", facts or machine()))


def from_log(log: Path = LOG, page: Path | None = PAGE, out: Callable[[str], None] = print,
             facts: str | None = None) -> int:
    """`--gpu --from-log`: the page's section rebuilt from the newest run in the JSON-lines log (exit 2 without)."""
    from bench.gpu_section import section

    if not Path(log).exists():
        out(f"bench --gpu --from-log: {log}: no such file (a `python -m bench --gpu` run writes it)")
        return 2
    device, records = read_log(log)
    every = len(rows())
    cut = None if len(records) >= every else f"rebuilt from {log.name}: {len(records)} of {every} rows were kept"
    result = section(device or "unknown GPU", fold(records), sum(r.get("seconds", 0) for r in records), cut=cut)
    if page is not None:
        write_section(page, result, facts)
        out(f"updated {page} from {len(records)} rows of {log}")
    return 0


def main(write: bool = True, budget_s: float = BUDGET_S, rebuild: bool = False) -> int:
    """The `--gpu` entry: one line and exit 0 without CUDA; else measure, keep and write (module docstring)."""
    if rebuild:
        return from_log(page=PAGE if write else None)
    try:
        import torch

        available = torch.cuda.is_available()
    except ImportError:
        available = False
    if not available:
        print("bench --gpu: no CUDA device here (torch.cuda.is_available() is False); nothing measured")
        return 0
    device = torch.cuda.get_device_name(0)
    return run(device, Clock(budget_s), page=PAGE if write else None, out=lambda line: print(line, flush=True))
