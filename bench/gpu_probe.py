"""One GPU measurement in a fresh process (a clean CUDA context and allocator): `python -m bench.gpu_probe KIND JSON`.

Prints one JSON line, the row bench.gpu puts on the page. Kinds:

* ``memory``: for one configuration, the analytic and traced predictions and
  the engine's calibrated prediction (after three real steps) against
  ``max_memory_allocated`` / ``max_memory_reserved`` of two real steps
  (engine.budget.truth) and the device total NVML reports right after;
* ``oom``: the allocator capped (``set_per_process_memory_fraction``) below a
  batch's predicted peak, the guard skipped as ``--no-vram-check`` does: the
  engine must halve the micro-batch and keep the effective batch;
* ``precision``: bf16 or fp16 (with its scaler) for some steps: loss falls,
  steps skipped;
* ``gauges``: MemorySampled's NVML and allocator readings against
  ``nvidia-smi --query-gpu=memory.used`` taken at the same step;
* ``speed``: the engine's steps/s on the GPU, GPU idle % (NVML utilisation
  sampled while it trains) and MFU against the dense bf16 peak table;
* ``baselines``: bench.baselines on the GPU (engine ÷ DataLoader loop,
  ÷ Lightning, quiet rounds), a row printed after every round, so a probe cut
  at its limit leaves the rounds it finished;
* ``tests``: every ``gpu``-marked test (pytest -m gpu): counts and failures;
* ``slices``: the dashboard attached ÷ alone (bench.viewer_slices).

SIGTERM (bench.gpu's limit, or a cut of the whole script) ends the probe
through ``SystemExit``, so the engines and loops it started are stopped by
their own cleanup before bench.gpu's SIGKILL follows.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from bench import autotune_gpu, engine_overhead_fast, gpu_compile
from bench.common import GpuBusy

MIB = 1 << 20


def _deep_merge(base: dict, update: dict) -> dict:
    from engine.core.config import deep_merge as merge

    return merge(base, update)

#: Dense (no sparsity) bf16 tensor-core peaks, TFLOP/s, by a substring of the device name (first match wins).
PEAK_BF16_TFLOPS = [("H200", 989.0), ("H100 PCIe", 756.0), ("H100", 989.0), ("GH200", 989.0), ("B200", 2250.0),
                    ("A100", 312.0), ("A800", 312.0), ("L40S", 362.0), ("L40", 181.0), ("L4", 121.0),
                    ("A10G", 70.0), ("A10", 125.0), ("RTX 4090", 165.0), ("RTX 3090", 71.0), ("V100", 125.0),
                    ("T4", 65.0)]


def peak_tflops(name: str) -> float | None:
    """The dense bf16 peak of a device by its name (None when it is not in the table)."""
    return next((peak for key, peak in PEAK_BF16_TFLOPS if key in name), None)


def _config(task: str, preset: str, overrides: dict, precision: str | None = None, oom_recovery: bool = True,
            **train):
    from engine.core import config as cfg

    runtime = {"device": "cuda", **({"precision": precision} if precision else {})}
    base = {"train": train, "evaluation": {"every": 0}, "runtime": runtime, "policies": {"oom_recovery": oom_recovery},
            "checkpoint": {"every_steps": 0}}
    return cfg.load(task=task, preset=preset, overrides=_deep_merge(base, overrides))


def _train(config):
    """Run the engine's Trainer on ``config`` in this process; (trainer, events)."""
    from engine.run.control.requests import Controls
    from engine.run.sinks import EventBus, MemorySink
    from engine.training.loop import Trainer

    sink = MemorySink()
    trainer = Trainer(config, EventBus([sink]), Controls())
    trainer.run()
    return trainer, sink.drain()


def memory(task: str, preset: str, overrides: dict) -> dict:
    """Predictions against the allocator and NVML for one configuration.

    ``analytic`` is priced for this GPU (its capability picks the attention kernel; ``kernel`` names the LM's);
    ``engine_total`` is the engine's calibrated device total after its first steps (prediction, allocator slack
    and the context it measured then), against NVML's used memory.
    """
    import torch

    from engine.budget import analytic, trace, truth
    from engine.budget.measure import nvml_memory
    from engine.tasks.attention_kernels import Target

    config = _config(task, preset, overrides, max_steps=3)
    target = Target.local("cuda", tuple(torch.cuda.get_device_capability(0)))
    row: dict = {"target": target.describe()}
    try:
        row["analytic"] = analytic.estimate(config, device="cuda", target=target).total
    except analytic.NoAnalyticModel:
        row["analytic"] = None
    if task == "lm":
        from engine.tasks.lm import memory as lm_memory

        kernel = lm_memory.attention_kernel(lm_memory.shape_of(config), config.task_config.seq_len,
                                            config.runtime.precision, target)
        row["kernel"] = kernel.name
    row["traced"] = trace.trace(config, device="cuda", use_cache=False).total
    row["allocated"] = truth.peak(config, "cuda", device="cuda")  # resets the peak, two real steps
    row["reserved"] = int(torch.cuda.max_memory_reserved())
    nvml = nvml_memory(0)
    row["nvml_used"], row["nvml_version"] = nvml.used, nvml.version
    torch.cuda.empty_cache()
    _, events = _train(config)
    started = next(e for e in events if e.type == "run_started")
    samples = [e for e in events if e.type == "memory" and e.predicted is not None]
    row["engine_predicted"] = started.budget.get("predicted")
    row["context"] = next((e.context for e in reversed(samples) if e.context is not None), None)
    row["engine_total"] = samples[-1].predicted if samples else None
    return row


def oom(task: str, preset: str, overrides: dict, cap_gib: float = 0.5) -> dict:
    """A real CUDA OOM: the allocator capped under the batch's peak; recovered and the effective batch kept?"""
    import torch

    from engine.budget import analytic

    total = torch.cuda.get_device_properties(0).total_memory
    cap = int(cap_gib * (1 << 30))
    batch = 8
    while analytic.estimate(_config(task, preset, overrides), batch_size=batch, device="cuda").total < 1.6 * cap \
            and batch < 1 << 16:
        batch *= 2
    torch.cuda.set_per_process_memory_fraction(cap / total, 0)
    # A few validation samples: the step-0 eval (no_grad, not recovered) must fit; the training step must not.
    overrides = _deep_merge(overrides, {"data": {"val_samples": 8}})
    config = _config(task, preset, overrides, max_steps=3, batch_size=batch, oom_recovery=True)
    trainer, events = _train(config)  # the Trainer itself runs no guard: this is --no-vram-check
    changes = [e for e in events if e.type == "setting" and e.name == "grad_accum"]
    finished = next((e for e in events if e.type == "run_finished"), None)
    return {"batch": batch, "cap": cap, "recoveries": len(changes), "grad_accum": trainer.grad_accum,
            "batch_kept": trainer.batch_size == batch, "steps": trainer.step,
            "status": finished.status if finished else "none",
            "reasons": [e.reason for e in changes][:3]}


def precision(task: str, preset: str, overrides: dict, precision: str, steps: int = 60) -> dict:
    """``precision`` (bf16 / fp16) for ``steps`` steps: first and last loss, skipped steps, steps/s."""
    config = _config(task, preset, overrides, max_steps=steps, precision=precision)
    start = time.perf_counter()
    trainer, events = _train(config)
    losses = [e.loss for e in events if e.type == "step" and not e.skipped]
    return {"precision": precision, "first": losses[0] if losses else None, "last": losses[-1] if losses else None,
            "skipped": sum(1 for e in events if e.type == "step" and e.skipped), "steps": trainer.step,
            "seconds": time.perf_counter() - start}


def _smi_used() -> int | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=20)
        return int(out.stdout.strip().splitlines()[0]) * MIB
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def gauges(task: str, preset: str, overrides: dict) -> dict:
    """MemorySampled's readings vs nvidia-smi, both taken at the same step boundary (memory is still then)."""
    from engine.run.control.requests import Controls
    from engine.run.sinks import EventBus
    from engine.training.loop import Trainer

    pairs: list[dict] = []

    from engine.budget.measure import nvml_memory

    def sink(event) -> None:
        if event.type == "memory" and event.nvml_used is not None and len(pairs) < 5 and event.step >= 3:
            pairs.append({"nvml": event.nvml_used, "reserved": event.reserved, "context": event.context,
                          "driver_reserve": event.nvml_reserved, "smi": _smi_used()})

    config = _config(task, preset, overrides, max_steps=40)
    trainer = Trainer(config, EventBus([sink]), Controls())
    trainer.run()
    context = next((p["context"] for p in reversed(pairs) if p["context"] is not None), None)
    return {"pairs": pairs, "context": context, "nvml_version": nvml_memory(0).version}


def speed(task: str, preset: str, overrides: dict, steps: int = 200) -> dict:
    """Engine steps/s on the GPU, GPU idle % while it trains (NVML, 10 Hz), and MFU (≈ 6·params·tokens a sample)."""
    import torch

    config = _config(task, preset, overrides, max_steps=steps)
    busy = GpuBusy()
    times: list[float] = []
    from engine.run.control.requests import Controls
    from engine.run.sinks import EventBus
    from engine.training.loop import Trainer

    def clock(event) -> None:
        if event.type == "step":
            times.append(time.perf_counter())
            if len(times) == steps // 4:
                busy.start()

    trainer = Trainer(config, EventBus([clock]), Controls())
    trainer.run()
    busy.stop()
    lo, hi = steps // 4, len(times) - 1
    rate = (hi - lo) / (times[hi] - times[lo])
    facts = trainer.task.describe()
    tokens = facts.get("tokens") or (facts.get("patches", 0) + facts.get("caption_tokens", 0)) or None
    name = torch.cuda.get_device_name(0)
    peak = peak_tflops(name)
    flops = 6 * trainer.params * (tokens or 1) * trainer.batch_size * rate if tokens else None
    return {"steps_per_s": rate, "gpu_idle_pct": busy.idle_pct,
            "mfu": flops / (peak * 1e12) if flops and peak else None, "tokens": tokens, "params": trainer.params,
            "batch": trainer.batch_size, "device": name, "peak_tflops": peak}


def baselines(rounds: int = 3) -> dict:
    """bench.baselines on the GPU: quiet rounds of engine, DataLoader loop and Lightning (no load block); the
    results so far printed after each round (the last line is the row)."""
    from bench import baselines as fair

    def show(results: dict) -> None:
        print(json.dumps(_plain(results)), flush=True)

    return _plain(fair.measure(100, (20, 80), rounds, with_load=False,
                               variants=(fair.ENGINE, fair.DATALOADER, fair.LIGHTNING), on_round=show))


def _plain(value):
    """``value`` as strict JSON can hold it: a NaN (a rate not read) becomes null, keys strings."""
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value if value is None or isinstance(value, (str, int, bool)) else str(value)


def tests() -> dict:
    """pytest -m gpu: passed / failed / skipped counts and the failures' names."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "-rf"],
                         capture_output=True, text=True)
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


def slices(pairs: int = 5) -> dict:
    """Dashboard attached ÷ alone on the GPU: ``pairs`` slice pairs of 5 s (bench.viewer_slices, demo preset)."""
    import tempfile
    from pathlib import Path

    from bench import viewer_slices

    with tempfile.TemporaryDirectory(prefix="bench-gpu-slices-") as tmp:
        return viewer_slices.measure(Path(tmp), pairs, 5.0, 3.0, 0)


KINDS = {"memory": memory, "oom": oom, "precision": precision, "gauges": gauges, "speed": speed,
         "autotune": autotune_gpu.autotune, "baselines": baselines, "tests": tests, "slices": slices,
         "fast": engine_overhead_fast.gpu_probe, **gpu_compile.KINDS}


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """`KIND JSON-kwargs`: run it, print its row as one JSON line."""
    argv = sys.argv[1:] if argv is None else argv
    kind, kwargs = argv[0], json.loads(argv[1]) if len(argv) > 1 else {}
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    print(json.dumps(_plain(KINDS[kind](**kwargs))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
