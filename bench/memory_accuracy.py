"""Memory-prediction accuracy on this CPU: truth vs traced vs analytic, with two reference estimates.

    python -m bench.memory_accuracy [--quick]

Truth: torch.profiler allocation events of two real optimizer steps
(engine.budget.truth). Traced: FakeTensorMode + MemTracker in a subprocess
(engine.budget.trace, uncached here). Analytic: engine.budget.analytic
(upper bound by design). Reference rows, for context: the "seed" formula
(attention tape only, depth·2·B·H·N²·4 bytes, what a first design guarded with) and an accelerate-style
``estimate-memory`` (weights + grads + Adam: 16 bytes per parameter, no
activations). Rows too big to run for real on this machine show the trace
and the analytic only.

Per rank (second table): one rank of an FSDP2 job at 1, 2 and 4 ranks,
analytic (engine.budget.layout) against FSDPMemTracker on a fake process
group (trace_worker.trace_fsdp, fake tensors): no real run has N ranks' worth
of memory to measure here.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile

from bench.common import Section, smoke

MIB = 1 << 20

#: The lm rows' random Llama (the `tiny` preset widened so activations, not weights, dominate).
LM_SHAPE = {"hidden_size": 128, "intermediate_size": 344, "heads": 4, "kv_heads": 2}
#: (label, task, preset, overrides, run truth?)
ROWS = [
    ("demo b4", "sensorlm", "demo", {"train": {"batch_size": 4}}, True),
    ("demo b16", "sensorlm", "demo", {"train": {"batch_size": 16}}, True),
    ("demo b64", "sensorlm", "demo", {"train": {"batch_size": 64}}, True),
    ("demo math b8", "sensorlm", "demo", {"train": {"batch_size": 8}, "model": {"attn_backend": "math"}}, True),
    ("demo chunked c32 b8", "sensorlm", "demo",
     {"train": {"batch_size": 8}, "model": {"attn_backend": "chunked", "attn_chunk": 32}}, True),
    ("demo ckpt math b8", "sensorlm", "demo",
     {"train": {"batch_size": 8}, "model": {"attn_backend": "math", "activation_checkpointing": True}}, True),
    ("demo accum 2 b16", "sensorlm", "demo", {"train": {"batch_size": 16, "grad_accum": 2}}, True),
    ("N2304 d128 sdpa b2", "sensorlm", "demo",
     {"train": {"batch_size": 2}, "model": {"patch_time": 10, "patch_channels": 2, "dim": 128, "depth": 3}}, True),
    ("N2304 d128 math b2", "sensorlm", "demo",
     {"train": {"batch_size": 2}, "model": {"patch_time": 10, "patch_channels": 2, "dim": 128, "depth": 3,
                                             "attn_backend": "math"}}, True),
    ("N2304 d128 chunked c256 b2", "sensorlm", "demo",
     {"train": {"batch_size": 2}, "model": {"patch_time": 10, "patch_channels": 2, "dim": 128, "depth": 3,
                                             "attn_backend": "chunked", "attn_chunk": 256}}, True),
    ("N2304 d128 ckpt b2", "sensorlm", "demo",
     {"train": {"batch_size": 2}, "model": {"patch_time": 10, "patch_channels": 2, "dim": 128, "depth": 3,
                                             "activation_checkpointing": True}}, True),
    ("tiny b4", "sensorlm", "tiny", {"train": {"batch_size": 4}}, True),
    ("demo bf16 b16", "sensorlm", "demo", {"train": {"batch_size": 16}, "runtime": {"precision": "bf16"}}, True),
    ("toy b32", "toy", "demo", {"train": {"batch_size": 32}}, True),
    *[(f"lm {kind} T{T} b4", "lm", "tiny", {"train": {"batch_size": 4}, "lm": {"finetune": mode, "seq_len": T,
                                                                              "model": LM_SHAPE}}, True)
      for kind, mode in (("LoRA", "lora"), ("full", "full")) for T in (64, 256)],
    ("toy b1024", "toy", "demo", {"train": {"batch_size": 1024}}, True),
    ("small b8 fp32", "sensorlm", "small", {"train": {"batch_size": 8}, "runtime": {"precision": "fp32"}}, False),
    ("base b8 fp32", "sensorlm", "base", {"train": {"batch_size": 8}, "runtime": {"precision": "fp32"}}, False),
    ("base b64 fp32", "sensorlm", "base", {"train": {"batch_size": 64}, "runtime": {"precision": "fp32"}}, False),
]
#: The per-rank rows' Llama: full fine-tune, width 128, 4k vocabulary (parameters, not activations, dominate).
LM_WIDE = {"lm": {"model": {"hidden_size": 128, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate_size": 352,
                            "vocab_size": 4096}, "finetune": "full", "seq_len": 32}, "train": {"batch_size": 8}}
#: (label, task, preset, overrides, world) of one FSDP2 rank.
RANK_ROWS = [
    *[(f"lm full d128 V4096 b8, fsdp2 ×{w}", "lm", "demo", LM_WIDE, w) for w in (1, 2, 4)],
    ("sensorlm demo b16, fsdp2 ×2", "sensorlm", "demo", {"train": {"batch_size": 16}}, 2),
    ("toy depth 4 b32, fsdp2 ×4", "toy", "demo", {"toy": {"depth": 4}}, 4),
]
#: --quick: one row per kind of claim (plain, checkpointed — the bound's loosest —, long-sequence chunked,
#: too big to run).
QUICK = {"demo b16", "demo ckpt math b8", "N2304 d128 chunked c256 b2", "base b8 fp32", "lm LoRA T256 b4"}


def seed_formula(config) -> int | None:
    """The attention-tape-only guard (the "seed" row: the simplest memory formula a first design used):
    every layer's attention tape, depth·2·B·H·N²·4 bytes, nothing else."""
    if config.task.name != "sensorlm":
        return None
    m, d = config.task_config.model, config.task_config.data
    n = (d.minutes // m.patch_time) * (d.channels // m.patch_channels)
    return m.depth * 2 * config.train.batch_size * m.heads * n * n * 4


def accelerate_style(config) -> int:
    """weights + grads + Adam states at fp32: 16 bytes per parameter (what `accelerate estimate-memory` reports)."""
    from engine.budget import analytic

    return 16 * sum(analytic.model_of(config)(config, 1, "fp32", "cpu").param_tensors)


def step_alone(overrides: dict) -> dict:
    """``overrides`` with batches built inline: these tables compare predictors of the step itself; the batches a
    data path builds ahead (engine.budget.ahead) are counted in bench.memory_random against a truth that holds
    them."""
    return {**overrides, "runtime": {**overrides.get("runtime", {}), "prefetch": False}}


def measure(label: str, task: str, preset: str, overrides: dict, real: bool) -> dict:
    """One row: truth (when feasible), traced (subprocess, uncached), analytic, references."""
    from engine.budget import analytic, trace
    from engine.core.config import load

    config = load(preset=preset, task=task, overrides=step_alone(overrides))
    row = {"config": label, "truth": None}
    if real:
        import torch

        from engine.budget import truth

        torch.set_num_threads(1)
        row["truth"] = truth.peak(config, "profiler")
    with tempfile.TemporaryDirectory() as cache:
        traced = trace.trace(config, cache_dir=cache, use_cache=False)
    bound = analytic.estimate(config, device="cpu")
    row.update(traced=traced.total, trace_s=traced.seconds, analytic=bound.total, phase=bound.settings["phase"],
               seed=seed_formula(config), accelerate=accelerate_style(config))
    return row


def measure_rank(label: str, task: str, preset: str, overrides: dict, world: int) -> dict:
    """One FSDP2 rank: the analytic per-rank estimate and the fake-process-group trace (subprocess, uncached)."""
    from engine.budget import analytic, trace
    from engine.budget.layout import Layout
    from engine.core.config import load

    config = load(preset=preset, task=task, overrides=step_alone(overrides))
    layout = Layout(world, "fsdp2")
    with tempfile.TemporaryDirectory() as cache:
        traced = trace.trace(config, batch_size=layout.rank_batch(config.train.batch_size), cache_dir=cache,
                             use_cache=False, layout=layout)
    bound = analytic.estimate(config, device="cpu", layout=layout)
    return {"config": label, "traced": traced.total, "trace_s": traced.seconds, "analytic": bound.total,
            "phase": bound.settings["phase"]}


def rank_table(rows: list[dict]) -> str:
    """The per-rank markdown table (MiB; analytic relative to the trace)."""
    out = ["| one rank of | traced MiB (FSDPMemTracker, fake group) | analytic MiB (err) | analytic peak at |",
           "|---|---:|---:|---|"]
    for r in rows:
        out.append(f"| {r['config']} | {_mib(r['traced'])} | {_mib(r['analytic'])} "
                   f"({_pct(r['analytic'], r['traced'])}) "
                   f"| {r['phase']} |")
    return "\n".join(out)


def _pct(value: int | None, ref: int | None) -> str:
    if value is None or not ref:
        return "—"
    return f"{(value - ref) / ref * 100:+.2f} %"


def _mib(value: int | None) -> str:
    return "—" if value is None else f"{value / MIB:,.1f}"


def table(rows: list[dict]) -> str:
    """The markdown table (MiB; errors relative to truth, or to the trace where truth is not run)."""
    out = ["| config | truth MiB | traced MiB (err) | analytic MiB (err) | seed formula MiB (err) | "
           "weights+grads+Adam MiB (err) | analytic peak at |",
           "|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        ref = r["truth"] if r["truth"] is not None else r["traced"]
        out.append(f"| {r['config']} | {_mib(r['truth'])} | {_mib(r['traced'])} ({_pct(r['traced'], r['truth'])}) | "
                   f"{_mib(r['analytic'])} ({_pct(r['analytic'], ref)}) | {_mib(r['seed'])} ({_pct(r['seed'], ref)}) | "
                   f"{_mib(r['accelerate'])} ({_pct(r['accelerate'], ref)}) | {r['phase']} |")
    return "\n".join(out)


def run(quick: bool = False) -> Section:
    """Benchmark-suite entry point."""
    wanted = {"toy b32"} if smoke() else QUICK if quick else {spec[0] for spec in ROWS}
    rows = [measure(*spec) for spec in ROWS if spec[0] in wanted]
    body = table(rows) + "\n\n" + (
        "Errors are against the truth (allocator events of two real steps), or against the trace for rows too "
        "large to run here (truth —). Analytic is an upper bound by design: CPU fp32 rows must read ≥ 0 and "
        "≤ +10 %; traced must be within ±2 %.")
    verdicts = []
    fp32 = [r for r in rows if r["truth"] is not None and "bf16" not in r["config"]]
    if fp32:
        worst_trace = max(abs(r["traced"] - r["truth"]) / r["truth"] for r in fp32) * 100
        over = [(r["analytic"] - r["truth"]) / r["truth"] * 100 for r in fp32]
        from bench.common import verdict

        verdicts.append(verdict("traced vs truth, worst |error| (CPU fp32)", worst_trace, 2.0, False, " %"))
        verdicts.append(verdict("analytic vs truth, lowest (CPU fp32)", min(over), 0.0, True, " %"))
        verdicts.append(verdict("analytic vs truth, highest (CPU fp32)", max(over), 10.0, False, " %"))
    ranks = [measure_rank(*spec) for spec in RANK_ROWS if not smoke() or spec[4] == 2 and spec[1] == "lm"]
    body += "\n\n" + rank_table(ranks)
    from bench.common import verdict

    worst = max(abs(r["analytic"] - r["traced"]) / r["traced"] for r in ranks) * 100
    verdicts.append(verdict("per-rank analytic vs FSDPMemTracker, worst |error|", worst, 10.0, False, " %"))
    return Section("Memory prediction accuracy", f"python -m bench --only memory_accuracy{' --quick' if quick else ''}",
                   body, verdicts)


def main(argv: list[str] | None = None) -> int:
    """Print the section as markdown (``--json`` for the raw rows)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.json:
        print(json.dumps([measure(*s) for s in ROWS if not args.quick or s[0] in QUICK], indent=1))
        return 0
    section = run(args.quick)
    section.show()
    return 0


if __name__ == "__main__":
    sys.exit(main())
