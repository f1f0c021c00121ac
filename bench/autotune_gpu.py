"""The GPU script's autotune row (`python -m bench --gpu`, probe kind ``autotune``): a live search on one GPU.

SensorLM ``base`` in bf16 (2448 tokens a sample) from a poor start: the math
attention backend, which keeps a B·H·N² softmax, in micro-batches of 2 with
activation checkpointing on. The search covers micro-batch × attention backend
× checkpointing under a budget (``--vram-gb``) set between the combinations'
predicted peaks, so part of the space is predicted not to fit and must never
be tried. The row: how the search ended, what it chose, its rate against the
start's (both measured in the run's own windows), the table, the candidates the
budget refused, and out-of-memory events (CUDA OOMs the run recovered from,
and candidates whose measured peak passed the budget). Runs in this process
(bench.gpu_probe's fresh process per row).
"""

from __future__ import annotations

#: The space and the poor start, as ``train`` flags (bench.autotune's Workload).
START = ("--preset", "base", "--batch-size", "8", "--grad-accum", "4", "--precision", "bf16", "--attn-backend",
         "math", "--activation-checkpointing", "true", "--device", "cuda")
SPACE = {"grad_accum": (1, 2, 4, 8), "attn_backend": ("sdpa", "math", "chunked"),
         "activation_checkpointing": (False, True)}


def autotune(steps: int = 400, window: int = 8) -> dict:
    """One search on the GPU (module docstring); the row."""
    from bench.autotune import Workload, budget_gb, predicted_peaks
    from engine.core import config as cfg
    from engine.core.cli_args import OneLineParser, add_train_arguments, overrides_from
    from engine.run.control.requests import Controls
    from engine.run.sinks import EventBus, MemorySink
    from engine.training.loop import Trainer

    workload = Workload("SensorLM base bf16", START, SPACE, 8, 1, "samples/s")
    peaks = predicted_peaks(workload, device="cuda")
    start = tuple(sorted({"grad_accum": "4", "attn_backend": "math", "activation_checkpointing": "true"}.items()))
    import torch

    from engine.budget.measure import device_info
    from engine.budget.plan import context_reserve

    reserve, _ = context_reserve(device_info(torch.device("cuda")), whole=True)  # what --vram-gb gives up first
    vram = budget_gb(peaks, start, reserve=reserve)
    parser = OneLineParser(prog="bench")
    add_train_arguments(parser)
    args = parser.parse_args([*START, "--vram-gb", f"{vram:.9f}", "--max-steps", str(steps), "--eval-every", "0",
                              "--checkpoint-every", "0", "--autotune", "--set", "sensorlm.data.val_samples=8",
                              "--set", f"autotune.settings={workload.tune_settings()!r}",
                              "--set", f"autotune.window_steps={window}"])
    config = cfg.load(args.config, preset=args.preset, overrides=overrides_from(args), task=args.task)
    sink = MemorySink()
    controls = Controls()

    def stop_after_choice(event) -> None:  # the row is the search: end the run once it has chosen
        if event.type == "autotune_chose":
            controls.request_graceful("autotune row measured", 0)

    Trainer(config, EventBus([sink, stop_after_choice]), controls).run()
    return row(sink.drain(), peaks)


def row(events: list, peaks: dict) -> dict:
    """The GPU row from a run's events (also what the page's section reads)."""
    started = next((e for e in events if e.type == "autotune_started"), None)
    chose = next((e for e in events if e.type == "autotune_chose"), None)
    if started is None or chose is None:
        return {"error": "the search did not finish: " + ", ".join(e.type for e in events[-6:])}
    ooms = sum(1 for e in events if (e.type == "warning" and "out of memory" in e.text)
               or (e.type == "setting" and "out of memory" in (e.reason or "")))
    over = sum(1 for r in chose.table if started.budget and r.get("measured") and r["measured"] > started.budget)
    table = [{"settings": r["settings"], "predicted": r["predicted"], "measured": r["measured"], "rate": r["rate"],
              "noise": r["noise"], "chosen": r["chosen"]} for r in chose.table]
    return {"status": chose.status, "chosen": chose.settings, "start": started.start, "rate": chose.rate,
            "start_rate": chose.start_rate, "gain": chose.rate / chose.start_rate if chose.rate and chose.start_rate
            else None, "seconds": chose.seconds, "measured": len(table), "refused": started.refused,
            "fit": started.candidates, "budget": started.budget, "ooms": ooms + over, "table": table,
            "grid": len(peaks)}


def section_line(r: dict, verdicts: list[str]) -> str:
    """The row on the page, with its verdicts (0 OOM events; the choice at least as fast as the start)."""
    from bench.common import verdict

    if "error" in r:
        verdicts.append("GPU autotune: not measured (" + r["error"] + ")")
        return f"**Autotune** (SensorLM base, bf16): error: {r['error']}"
    chosen = " · ".join(f"{k} {v}" for k, v in r["chosen"].items())
    gain = f"x{r['gain']:.2f} the start's rate" if r.get("gain") else "no gain measured"
    verdicts.append(verdict("GPU autotune: out-of-memory events", float(r["ooms"]), 0.0, higher_is_better=False))
    if r.get("gain"):
        verdicts.append(verdict("GPU autotune: chosen ÷ start samples/s", r["gain"], 1.0))
    return (f"**Autotune** (SensorLM base, batch 8, bf16, from math attention in micro-batches of 2 with "
            f"checkpointing): {r['status']} {chosen}, {gain}, in {r['seconds']:.1f} s; {r['measured']} candidates "
            f"measured, {r['refused']} of {r['fit'] + r['refused']} combinations predicted not to fit the budget "
            f"({r['budget'] / (1 << 30):.2f} GiB) and never tried; {r['ooms']} out-of-memory events.")
