"""A stand-in for bench.gpu_probe on a machine without a GPU: `python fake_gpu_probe.py KIND JSON` prints a row.

Each row has the shape the real probe's kind prints, and echoes the arguments it was given (``args``), so a
test sees what bench.gpu asked for. ``FAKE_GPU_HANG=KIND``: that kind prints a first, partial row (one
baselines round) and then hangs, as a probe does when the budget runs out under it; ``FAKE_GPU_PIDS=FILE``:
each probe appends "KIND PID" there once its row (or partial row) is out.
"""

from __future__ import annotations

import json
import os
import sys
import time

MIB = 1 << 20
ENGINE, DATALOADER, LIGHTNING = "engine, defaults", "DataLoader loop (1 worker)", "Lightning (1 worker)"


def row(kind: str, args: dict) -> dict:
    if kind == "memory":
        return {"allocated": 100 * MIB, "analytic": 104 * MIB, "traced": 101 * MIB, "reserved": 120 * MIB,
                "engine_predicted": 125 * MIB, "nvml_used": 900 * MIB, "engine_total": 905 * MIB,
                "context": 780 * MIB}
    if kind == "oom":
        return {"batch": 512, "cap": 1 << 29, "recoveries": 1, "grad_accum": 2, "batch_kept": True, "steps": 3,
                "status": "finished", "reasons": ["out of memory: micro-batch 512 -> 256"]}
    if kind == "gauges":
        return {"pairs": [{"nvml": 1000 * MIB, "reserved": 200 * MIB, "smi": 1000 * MIB}], "context": 800 * MIB,
                "nvml_version": "v2"}
    if kind == "baselines":
        return {ENGINE: {"quiet": [110.0, 108.0, 111.0]}, DATALOADER: {"quiet": [100.0] * 3},
                LIGHTNING: {"quiet": [100.0] * 3}}
    if kind == "speed":
        return {"steps_per_s": 9.5, "gpu_idle_pct": 4.0, "mfu": 0.3, "tokens": 2512, "params": 134175254,
                "batch": 8, "device": "Fake GPU", "peak_tflops": 989.0}
    if kind == "autotune":
        return {"status": "chosen", "chosen": {"grad_accum": 1, "attn_backend": "sdpa"},
                "start": {"grad_accum": 4, "attn_backend": "math"}, "rate": 30.0,
                "start_rate": 10.0, "gain": 3.0, "seconds": 20.0, "measured": 7, "refused": 6, "fit": 18,
                "budget": 40 << 30, "ooms": 0, "table": [], "grid": 24}
    if kind == "precision":
        return {"precision": args["precision"], "first": 5.0, "last": 4.0, "skipped": 0, "steps": 60}
    if kind == "compiled":
        return {"mode": args["mode"], "eager_steps_per_s": 10.0, "compiled_steps_per_s": 13.0, "ratio": 1.3,
                "compile_s": 20.0, "recompiles": 0, "eager_peak": 110 * MIB, "compiled_peak": 100 * MIB,
                "predicted": 108 * MIB}
    if kind == "readback":
        one = {"steps_per_s": 900.0, "syncs_per_step": 0.0, "gpu_idle_pct": 20.0}
        return {"sync": [{**one, "steps_per_s": 700.0, "syncs_per_step": 1.0, "gpu_idle_pct": 45.0}] * 2,
                "deferred": [one] * 2}
    if kind == "fast":
        return {"bare": [1500.0] * 4, "engine": [1470.0] * 4, "bare_lm": [600.0] * 4, "engine_lm": [590.0] * 4}
    if kind == "tests":
        return {"passed": 3, "failed": 0, "skipped": 0, "errors": 0, "deselected": 900, "failures": []}
    if kind == "slices":
        return {"bare": [10.0] * 5, "viewer": [9.95] * 5}
    raise SystemExit(f"unknown kind {kind}")


def main() -> int:
    kind, args = sys.argv[1], json.loads(sys.argv[2])
    out = {**row(kind, args), "args": args}
    hang = os.environ.get("FAKE_GPU_HANG") == kind
    if hang:  # one round done, then stuck: what a cut must keep
        out = {ENGINE: {"quiet": [110.0]}, DATALOADER: {"quiet": [100.0]}, LIGHTNING: {"quiet": [100.0]},
               "args": args}
    print("warming up (a line that is not a row)")
    print(json.dumps(out), flush=True)
    if os.environ.get("FAKE_GPU_PIDS"):
        with open(os.environ["FAKE_GPU_PIDS"], "a") as fh:
            fh.write(f"{kind} {os.getpid()}\n")
    if hang:
        time.sleep(120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
