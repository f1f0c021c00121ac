"""`python -m bench --gpu`: the GPU truth in one short script (≤ 8 minutes on one GPU), written to the results page.

Without CUDA it says so in one line and exits 0. With a GPU, each check runs
in a fresh process (bench.gpu_probe: a clean CUDA context, so one row's cached
memory never shows up in the next) under a time limit, and a row that fails
is an error row, not a lost run: GPU time is scarce, so whatever was measured
reaches the page. Rows, every one a ratio or an error against the truth:

* memory (≥ 6 configurations: SensorLM demo and base at two batches, every
  attention backend, the toy task, and every other task installed): analytic
  and traced predictions ÷ ``max_memory_allocated``, the engine's calibrated
  prediction ÷ ``max_memory_reserved``, its device total ÷ NVML used;
* a real CUDA OOM recovered by halving the micro-batch, effective batch kept;
* bf16 and fp16 (scaler) steps that learn;
* speed: the fair baselines (bench.baselines: engine ÷ DataLoader loop,
  ÷ Lightning) on the GPU, the dashboard attached ÷ alone (slices), GPU idle %
  and MFU against the dense bf16 peak table;
* gauges: MemorySampled's NVML and allocator readings ÷ nvidia-smi;
* every ``gpu``-marked test (pytest -m gpu).

The page gets a section "GPU: <device name>" (other sections kept).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from bench.common import ROOT, Section, fmt_stats, ratios, stats, verdict

#: The whole script's budget and each probe's limit (seconds).
BUDGET_S = 8 * 60
PROBE_S = 150
MIB = 1 << 20

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
]


class Clock:
    """The script's deadline: probes get what is left, up to their own limit."""

    def __init__(self, budget_s: float = BUDGET_S) -> None:
        self.end = time.monotonic() + budget_s

    def left(self) -> float:
        """Seconds left in the budget."""
        return self.end - time.monotonic()


def probe(kind: str, clock: Clock, limit: float = PROBE_S, **kwargs) -> dict:
    """One bench.gpu_probe process: its JSON row, or {"error": why}."""
    timeout = min(limit, clock.left())
    if timeout < 10:
        return {"error": "skipped: the 8-minute budget is spent"}
    try:
        out = subprocess.run([sys.executable, "-m", "bench.gpu_probe", kind, json.dumps(kwargs)], cwd=ROOT,
                             capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"exit {out.returncode}: {tail[:200]}"}
    return parse_row(out.stdout)


def parse_row(stdout: str) -> dict:
    """The last line of a probe's output as its row ({"error": …} when it is not JSON)."""
    lines = [line for line in stdout.strip().splitlines() if line.startswith("{")]
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": f"no result line in the probe's output: {stdout[-200:]!r}"}


def other_tasks() -> list[tuple[str, str, str, dict]]:
    """A memory row for every installed task besides sensorlm and toy, at its default preset."""
    from engine.core.registry import task_names

    return [(f"{name} (default preset)", name, "", {}) for name in task_names() if name not in ("sensorlm", "toy")]


def gpu_tests(clock: Clock) -> dict:
    """pytest -m gpu: passed / failed / skipped counts and the failures' names."""
    timeout = min(180, clock.left())
    if timeout < 10:
        return {"error": "skipped: the 8-minute budget is spent"}
    try:
        out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "-rf"],
                             cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    return parse_pytest(out.stdout)


def parse_pytest(stdout: str) -> dict:
    """{passed, failed, skipped, errors, deselected, failures: [names]} from pytest -q output.

    (``errors``, not ``error``: a row with an ``error`` key is a row that failed to measure.)"""
    import re

    counts = {k: 0 for k in ("passed", "failed", "skipped", "errors", "deselected")}
    summary = [line for line in stdout.splitlines() if re.search(r"\d+ (passed|failed|skipped|deselected)", line)]
    for number, word in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", summary[-1] if summary else ""):
        counts["errors" if word.startswith("error") else word] += int(number)
    counts["failures"] = re.findall(r"^FAILED (\S+)", stdout, flags=re.M)
    return counts


def baselines_on_gpu(clock: Clock) -> dict:
    """bench.baselines on the GPU: 3 quiet rounds of engine, DataLoader loop and Lightning (no load block)."""
    from bench import baselines

    if clock.left() < 120:
        return {"error": "skipped: the 8-minute budget is spent"}
    try:
        return baselines.measure(100, (20, 80), 3, with_load=False,
                                 variants=(baselines.ENGINE, baselines.DATALOADER, baselines.LIGHTNING))
    except Exception as exc:  # a broken row must not lose the others
        return {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}


def dashboard_slices(clock: Clock) -> dict:
    """Dashboard attached ÷ alone on the GPU: 5 slice pairs of 5 s (bench.viewer_slices, demo preset)."""
    import tempfile

    from bench import viewer_slices

    if clock.left() < 90:
        return {"error": "skipped: the 8-minute budget is spent"}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-gpu-slices-") as tmp:
            return viewer_slices.measure(Path(tmp), 5, 5.0, 3.0, 0)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}


def measure(clock: Clock) -> dict:
    """Every row, in order of what matters most if time runs out."""
    results: dict = {"memory": []}
    for label, task, preset, overrides in MEMORY_ROWS + other_tasks():
        # 8 validation samples: the probe's start-up eval is not what is measured, and GPU minutes are few.
        light = {**overrides, "data": {**overrides.get("data", {}), "val_samples": 8}}
        row = probe("memory", clock, task=task, preset=preset or None, overrides=light)
        results["memory"].append({"config": label, **row})
    results["oom"] = probe("oom", clock, task="sensorlm", preset="demo", overrides={})
    results["precision"] = [probe("precision", clock, task="sensorlm", preset="demo", overrides={}, kind=kind)
                            for kind in ("bf16", "fp16")]
    results["gauges"] = probe("gauges", clock, task="sensorlm", preset="demo", overrides={})
    results["tests"] = gpu_tests(clock)
    results["speed"] = probe("speed", clock, task="sensorlm", preset="base", overrides={"train": {"batch_size": 8}},
                             steps=120)
    results["baselines"] = baselines_on_gpu(clock)
    results["slices"] = dashboard_slices(clock)
    return results


def _err(value, truth) -> str:
    if value is None or not truth:
        return "—"
    return f"{(value - truth) / truth * 100:+.1f} %"


def _mib(value) -> str:
    return "—" if value is None else f"{value / MIB:,.0f}"


def section(device: str, results: dict, seconds: float) -> Section:
    """The page section from the rows (measured, or given in the smoke test)."""
    lines = [f"Device: **{device}**. `python -m bench --gpu` took {seconds / 60:.1f} min. Errors are "
             "(prediction − truth) ÷ truth; truth is `max_memory_allocated` / `max_memory_reserved` of two real "
             "steps in a fresh process, and NVML's used memory right after them.", "",
             "| config | allocated MiB | analytic (err) | traced (err) | reserved MiB | engine predicted (err vs "
             "reserved) | NVML used MiB | engine device total (err vs NVML) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    verdicts: list[str] = []
    analytic_err, traced_err, under = [], [], []
    for r in results["memory"]:
        if "error" in r:
            lines.append(f"| {r['config']} | error: {r['error']} | | | | | | |")
            continue
        truth = r["allocated"]
        lines.append(f"| {r['config']} | {_mib(truth)} | {_mib(r['analytic'])} ({_err(r['analytic'], truth)}) | "
                     f"{_mib(r['traced'])} ({_err(r['traced'], truth)}) | {_mib(r['reserved'])} | "
                     f"{_mib(r['engine_predicted'])} ({_err(r['engine_predicted'], r['reserved'])}) | "
                     f"{_mib(r['nvml_used'])} | {_mib(r['engine_total'])} "
                     f"({_err(r['engine_total'], r['nvml_used'])}) |")
        if r["analytic"] is not None:
            analytic_err.append((r["analytic"] - truth) / truth * 100)
        traced_err.append((r["traced"] - truth) / truth * 100)
        under += [r["config"]] if r["analytic"] is not None and r["analytic"] < truth else []
    if analytic_err:
        verdicts.append(verdict("GPU analytic vs max_memory_allocated, lowest", min(analytic_err), 0.0, unit=" %"))
        verdicts.append(verdict("GPU analytic vs max_memory_allocated, highest", max(analytic_err), 10.0,
                                higher_is_better=False, unit=" %"))
    if traced_err:
        verdicts.append(verdict("GPU traced vs max_memory_allocated, worst |error|", max(map(abs, traced_err)), 3.0,
                                higher_is_better=False, unit=" %"))
    lines += ["", _oom_line(results["oom"], verdicts), "", _precision_lines(results["precision"], verdicts), "",
              _gauge_line(results["gauges"], verdicts), "", _speed_lines(results, verdicts), "",
              _tests_line(results["tests"], verdicts)]
    return Section(f"GPU: {device}", "python -m bench --gpu", "\n".join(lines), verdicts)


def _oom_line(r: dict, verdicts: list[str]) -> str:
    if "error" in r:
        verdicts.append("GPU OOM recovery: not measured (" + r["error"] + ")")
        return f"**OOM recovery**: error: {r['error']}"
    ok = r["recoveries"] >= 1 and r["batch_kept"] and r["status"] == "finished"
    verdicts.append(f"GPU OOM recovery (allocator capped at {r['cap'] / (1 << 30):.1f} GiB, batch {r['batch']}): "
                    + ("recovered, effective batch kept — met" if ok else "NOT recovered — MISSED"))
    return (f"**OOM recovery**: batch {r['batch']} with the allocator capped at {r['cap'] / (1 << 30):.1f} GiB "
            f"(guard skipped, as `--no-vram-check`): {r['recoveries']} halving(s), grad_accum {r['grad_accum']}, "
            f"effective batch kept: {r['batch_kept']}, {r['steps']} steps, {r['status']}. "
            + "; ".join(r.get("reasons", [])))


def _precision_lines(rows: list[dict], verdicts: list[str]) -> str:
    out = ["| precision | first loss | last loss | skipped steps | steps |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            out.append(f"| ? | error: {r['error']} | | | |")
            verdicts.append(f"GPU precision: not measured ({r['error']})")
            continue
        learns = r["first"] is not None and r["last"] is not None and r["last"] < r["first"]
        out.append(f"| {r['precision']} | {r['first']:.4f} | {r['last']:.4f} | {r['skipped']} | {r['steps']} |")
        verdicts.append(f"GPU {r['precision']} steps run and learn: " + ("met" if learns else "MISSED"))
    return "\n".join(out)


def _gauge_line(r: dict, verdicts: list[str]) -> str:
    if "error" in r or not r.get("pairs"):
        why = r.get("error", "no MemorySampled with NVML readings")
        verdicts.append(f"GPU gauges vs nvidia-smi: not measured ({why})")
        return f"**Gauges**: error: {why}"
    nvml = [abs(p["nvml"] - p["smi"]) / p["smi"] * 100 for p in r["pairs"] if p["smi"]]
    alloc = [abs(p["reserved"] + (r["context"] or 0) - p["smi"]) / p["smi"] * 100 for p in r["pairs"]
             if p["smi"] and p["reserved"] is not None]
    if nvml:
        verdicts.append(verdict("GPU gauge: MemorySampled NVML vs nvidia-smi, worst |error|", max(nvml), 1.0,
                                higher_is_better=False, unit=" %"))
    if alloc:
        verdicts.append(verdict("GPU gauge: allocator reserved + context vs nvidia-smi, worst |error|", max(alloc),
                                1.0, higher_is_better=False, unit=" %"))
    return (f"**Gauges** ({len(r['pairs'])} samples): NVML vs nvidia-smi worst "
            f"{max(nvml, default=float('nan')):.2f} %, "
            f"allocator reserved + context {_mib(r['context'])} MiB vs nvidia-smi worst "
            f"{max(alloc, default=float('nan')):.2f} %.")


def _speed_lines(results: dict, verdicts: list[str]) -> str:
    from bench import baselines

    out = []
    s = results["speed"]
    if "error" in s:
        out.append(f"**Speed** (base, batch 8, bf16): error: {s['error']}")
    else:
        mfu = f"{s['mfu'] * 100:.1f} %" if s.get("mfu") is not None else "— (device not in the peak table)"
        idle = f"{s['gpu_idle_pct']:.1f} %" if s.get("gpu_idle_pct") is not None else "—"
        out.append(f"**Speed** (SensorLM base, batch {s['batch']}, bf16): {s['steps_per_s']:.2f} steps/s, GPU idle "
                   f"{idle} (NVML utilisation while training: time the data path and the engine leave it waiting), "
                   f"MFU {mfu} (≈ 6 · {s['params']:,} params · {s['tokens']} tokens a sample, against "
                   f"{s['peak_tflops']} TFLOP/s dense bf16).")
    b = results["baselines"]
    if "error" in b:
        out.append(f"**Fair baselines on the GPU**: error: {b['error']}")
    else:
        dl = ratios(b[baselines.ENGINE]["quiet"], b[baselines.DATALOADER]["quiet"])
        light = ratios(b[baselines.ENGINE]["quiet"], b[baselines.LIGHTNING]["quiet"])
        out.append(f"**Fair baselines on the GPU** (demo, batch 16, 3 rounds): engine "
                   f"{fmt_stats(b[baselines.ENGINE]['quiet'], '.1f')} steps/s; ÷ DataLoader loop **{fmt_stats(dl)}**;"
                   f" ÷ Lightning **{fmt_stats(light)}**.")
        verdicts.append(verdict("GPU engine ÷ DataLoader loop steps/s", stats(dl)[1], 1.0))
        verdicts.append(verdict("GPU engine ÷ Lightning steps/s", stats(light)[1], 1.05))
    sl = results["slices"]
    if "error" in sl:
        out.append(f"**Dashboard on the GPU**: error: {sl['error']}")
    else:
        pair = ratios(sl["viewer"], sl["bare"])
        out.append(f"**Dashboard on the GPU**: attached ÷ alone **{fmt_stats(pair)}** over {len(pair)} slice pairs.")
        verdicts.append(verdict("GPU dashboard attached ÷ alone steps/s (slices)", stats(pair)[1], 0.99)
                        + f"; spread {min(pair):.3f}–{max(pair):.3f}")
    return "\n\n".join(out)


def _tests_line(r: dict, verdicts: list[str]) -> str:
    if "error" in r:
        verdicts.append(f"GPU tests: not run ({r['error']})")
        return f"**`gpu` tests**: error: {r['error']}"
    ok = r["failed"] == 0 and r["errors"] == 0 and r["passed"] > 0
    verdicts.append(f"GPU tests (pytest -m gpu): {r['passed']} passed, {r['failed']} failed — "
                    + ("met" if ok else "MISSED"))
    failures = f" Failed: {', '.join(r['failures'])}." if r["failures"] else ""
    return f"**`gpu` tests**: {r['passed']} passed, {r['failed']} failed, {r['skipped']} skipped.{failures}"


def main(write: bool = True) -> int:
    """The `--gpu` entry: one line and exit 0 without CUDA; else measure, print, update docs/BENCHMARKS.md."""
    try:
        import torch

        available = torch.cuda.is_available()
    except ImportError:
        available = False
    if not available:
        print("bench --gpu: no CUDA device here (torch.cuda.is_available() is False); nothing measured")
        return 0
    device = torch.cuda.get_device_name(0)
    start = time.perf_counter()
    results = measure(Clock())
    result = section(device, results, time.perf_counter() - start)
    print(result.body)
    for line in result.verdicts:
        print("  " + line)
    if write:
        from bench.common import machine
        from bench.page import merge_page

        page = ROOT / "docs" / "BENCHMARKS.md"
        text = page.read_text() if page.exists() else "# Benchmarks\n"
        page.write_text(merge_page(text, [result], "python -m bench --gpu", machine()))
        print(f"updated {page}")
    return 0
