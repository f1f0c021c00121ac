"""The page's "GPU: <device>" section from the rows `python -m bench --gpu` kept (all of them, or those a cut left).

A group with no row says it was not measured and why (the run was cut before
it); a row that failed shows its error where its numbers would be. Errors are
(prediction − truth) ÷ truth.
"""

from __future__ import annotations

from bench import autotune_gpu, engine_overhead_fast
from bench.common import Section, fmt_stats, ratios, stats, verdict

MIB = 1 << 20
NOT_REACHED = {"error": "not measured: the run ended before this row"}


def _err(value, truth) -> str:
    if value is None or not truth:
        return "—"
    return f"{(value - truth) / truth * 100:+.1f} %"


def _mib(value) -> str:
    return "—" if value is None else f"{value / MIB:,.0f}"


def section(device: str, results: dict, seconds: float, cut: str | None = None) -> Section:
    """The page section from the folded rows (bench.gpu.fold); ``cut``: why the run ended early, if it did."""
    lines = [f"Device: **{device}**. `python -m bench --gpu` took {seconds / 60:.1f} min"
             + (f" and was **cut**: {cut}" if cut else "") + ". Errors are (prediction − truth) ÷ truth; truth is "
             "`max_memory_allocated` / `max_memory_reserved` of two real steps in a fresh process, and NVML's "
             "used memory right after them. Every row is also in `docs/BENCHMARKS-gpu.jsonl`.", ""]
    verdicts: list[str] = []
    lines += _memory_lines(results.get("memory") or [dict(NOT_REACHED, config="(every memory row)")], verdicts)
    lines += ["", _oom_line(results.get("oom", NOT_REACHED), verdicts), "",
              _gauge_line(results.get("gauges", NOT_REACHED), verdicts), "",
              _speed_lines(results, verdicts), "",
              autotune_gpu.section_line(results.get("autotune", NOT_REACHED), verdicts), "",
              *_compile_lines(results.get("compile"), verdicts), "",
              engine_overhead_fast.gpu_line(results.get("fast", NOT_REACHED), verdicts), "",
              _precision_lines(results.get("precision") or [NOT_REACHED], verdicts), "",
              _tests_line(results.get("tests", NOT_REACHED), verdicts)]
    return Section(f"GPU: {device}", "python -m bench --gpu", "\n".join(lines), verdicts,
                   skipped=f"cut: {cut}" if cut else None)


def _memory_lines(rows: list[dict], verdicts: list[str]) -> list[str]:
    lines = ["| config | allocated MiB | analytic (err) | traced (err) | reserved MiB | engine predicted (err vs "
             "reserved) | NVML used MiB | engine device total (err vs NVML) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    analytic_err, traced_err = [], []
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['config']} | error: {r['error']} | | | | | | |")
            continue
        truth = r["allocated"]
        config = r["config"] + (f" ({r['kernel']})" if r.get("kernel") else "")
        lines.append(f"| {config} | {_mib(truth)} | {_mib(r['analytic'])} ({_err(r['analytic'], truth)}) | "
                     f"{_mib(r['traced'])} ({_err(r['traced'], truth)}) | {_mib(r['reserved'])} | "
                     f"{_mib(r['engine_predicted'])} ({_err(r['engine_predicted'], r['reserved'])}) | "
                     f"{_mib(r['nvml_used'])} | {_mib(r['engine_total'])} "
                     f"({_err(r['engine_total'], r['nvml_used'])}) |")
        if r["analytic"] is not None:
            analytic_err.append((r["analytic"] - truth) / truth * 100)
        if r["traced"] is not None:
            traced_err.append((r["traced"] - truth) / truth * 100)
    if analytic_err:
        verdicts.append(verdict("GPU analytic vs max_memory_allocated, lowest", min(analytic_err), 0.0, unit=" %"))
        verdicts.append(verdict("GPU analytic vs max_memory_allocated, highest", max(analytic_err), 10.0,
                                higher_is_better=False, unit=" %"))
    if traced_err:
        verdicts.append(verdict("GPU traced vs max_memory_allocated, worst |error|", max(map(abs, traced_err)), 3.0,
                                higher_is_better=False, unit=" %"))
    return lines


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
            out.append(f"| {r.get('precision', '?')} | error: {r['error']} | | | |")
            verdicts.append(f"GPU {r.get('precision', '')} precision: not measured ({r['error']})".replace("  ", " "))
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
    alloc = [abs(p["reserved"] + (p.get("context") or r["context"] or 0) - p["smi"]) / p["smi"] * 100
             for p in r["pairs"] if p["smi"] and p["reserved"] is not None]
    if nvml:
        verdicts.append(verdict("GPU gauge: MemorySampled NVML vs nvidia-smi, worst |error|", max(nvml), 1.0,
                                higher_is_better=False, unit=" %"))
    if alloc:
        verdicts.append(verdict("GPU gauge: allocator reserved + context vs nvidia-smi, worst |error|", max(alloc),
                                1.0, higher_is_better=False, unit=" %"))
    version = f", NVML memory info {r['nvml_version']}" if r.get("nvml_version") else ""
    return (f"**Gauges** ({len(r['pairs'])} samples{version}): NVML vs nvidia-smi worst "
            f"{max(nvml, default=float('nan')):.2f} %, "
            f"allocator reserved + context {_mib(r['context'])} MiB vs nvidia-smi worst "
            f"{max(alloc, default=float('nan')):.2f} %.")


def _speed_lines(results: dict, verdicts: list[str]) -> str:
    out = [_baselines_line(results.get("baselines", NOT_REACHED), verdicts)]
    s = results.get("speed", NOT_REACHED)
    if "error" in s:
        out.append(f"**Speed** (base, batch 8, bf16): error: {s['error']}")
    else:
        mfu = f"{s['mfu'] * 100:.1f} %" if s.get("mfu") is not None else "— (device not in the peak table)"
        idle = f"{s['gpu_idle_pct']:.1f} %" if s.get("gpu_idle_pct") is not None else "—"
        out.append(f"**Speed** (SensorLM base, batch {s['batch']}, bf16): {s['steps_per_s']:.2f} steps/s, GPU idle "
                   f"{idle} (NVML utilisation while training: time the data path and the engine leave it waiting), "
                   f"MFU {mfu} (≈ 6 · {s['params']:,} params · {s['tokens']} tokens a sample, against "
                   f"{s['peak_tflops']} TFLOP/s dense bf16).")
    sl = results.get("slices", NOT_REACHED)
    if "error" in sl:
        out.append(f"**Dashboard on the GPU**: error: {sl['error']}")
    else:
        pair = ratios(sl["viewer"], sl["bare"])
        out.append(f"**Dashboard on the GPU**: attached ÷ alone **{fmt_stats(pair)}** over {len(pair)} slice pairs.")
        verdicts.append(verdict("GPU dashboard attached ÷ alone steps/s (slices)", stats(pair)[1], 0.99)
                        + f"; spread {min(pair):.3f}–{max(pair):.3f}")
    return "\n\n".join(out)


def _baselines_line(b: dict, verdicts: list[str]) -> str:
    from bench import baselines

    names = (baselines.ENGINE, baselines.DATALOADER, baselines.LIGHTNING)
    # a rate the bench could not read is null in the kept row: NaN again, so the rounds stay paired
    quiet = {name: [float("nan") if v is None else v for v in b.get(name, {}).get("quiet", [])]
             for name in names} if "error" not in b else {}
    if "error" in b or not all(quiet.values()):
        why = b.get("error", "no complete round")
        verdicts.append(f"GPU fair baselines: not measured ({why})")
        return f"**Fair baselines on the GPU**: error: {why}"
    dl = ratios(quiet[baselines.ENGINE], quiet[baselines.DATALOADER])
    light = ratios(quiet[baselines.ENGINE], quiet[baselines.LIGHTNING])
    cut = f" (cut: {b['cut']})" if b.get("cut") else ""
    verdicts.append(verdict("GPU engine ÷ DataLoader loop steps/s", stats(dl)[1], 1.0))
    verdicts.append(verdict("GPU engine ÷ Lightning steps/s", stats(light)[1], 1.05))
    return (f"**Fair baselines on the GPU** (demo, batch 16, {len(dl)} rounds{cut}): engine "
            f"{fmt_stats(quiet[baselines.ENGINE], '.1f')} steps/s; ÷ DataLoader loop **{fmt_stats(dl)}**;"
            f" ÷ Lightning **{fmt_stats(light)}**.")


def _tests_line(r: dict, verdicts: list[str]) -> str:
    if "error" in r:
        verdicts.append(f"GPU tests: not run ({r['error']})")
        return f"**`gpu` tests**: error: {r['error']}"
    ok = r["failed"] == 0 and r["errors"] == 0 and r["passed"] > 0
    verdicts.append(f"GPU tests (pytest -m gpu): {r['passed']} passed, {r['failed']} failed — "
                    + ("met" if ok else "MISSED"))
    failures = f" Failed: {', '.join(r['failures'])}." if r["failures"] else ""
    return f"**`gpu` tests**: {r['passed']} passed, {r['failed']} failed, {r['skipped']} skipped.{failures}"


def _compile_lines(rows: list[dict] | None, verdicts: list[str]) -> list[str]:
    """torch.compile and the sync-free step (bench.gpu_compile renders its own rows)."""
    if not rows:
        return ["torch.compile and the sync-free step: not measured (the run ended before these rows)."]
    from bench import gpu_compile

    return ["torch.compile (eager, then compiled, the guard off) and the step readback (sync vs deferred):", "",
            *gpu_compile.lines(rows, verdicts)]
