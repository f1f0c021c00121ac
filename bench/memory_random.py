"""The memory budget on configurations nobody tuned it on: seeded random configs per task, predicted and counted.

    python -m bench.memory_random [--quick] [--n 30] [--seed 0]

Each config is drawn from a task's own knobs (shape, batch, sequence, LoRA or
full with every [lm.lora] field, its dropout among them, the LM's tokenizer and
corpus reading, tied embeddings, attention implementation, activation
checkpointing, dropout, gradient accumulation) and the data path (built inline,
on the builder thread, in one or two worker processes, or planned), small
enough to run three real steps on a CPU. The prediction is what the start guard
uses: the analytic bound (engine.budget.analytic) for a task that has one, the
trace (engine.budget.trace) for one that has not, with the batches the data
path builds ahead (engine.budget.ahead). The truth is an independent count
through the dispatcher (engine.budget.cpu_meter.StepPeak, via
engine.budget.truth, method "dispatcher") over three engine-shaped steps with
that many micro-batches built beside each, CPU fp32. The contract: never under, at most +10 % over; the table prints
each task's worst (lowest and highest) config. tests/engine/budget/
test_memory_random.py runs a handful per task on every CI run.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile

from bench.common import Section, smoke

#: Tasks and how many configs --quick draws of each (the full bench: 30).
TASKS = ("lm", "sensorlm", "toy", "gapfill")


#: LoRA target choices: the shorthands and a few lists of names (peft matches each by its suffix).
_TARGETS = ("all-linear", "attention", "mlp", ["q_proj", "v_proj"], ["o_proj", "down_proj"],
            ["k_proj", "gate_proj", "up_proj"])


def _lm(rng: random.Random) -> tuple[str, dict]:
    """Every [lm] setting (model shape and attention, full or LoRA with every [lm.lora] field, sequence, tokenizer,
    the corpus reading), the model directory apart: a random Llama of the drawn shape stands for one."""
    heads = rng.choice((2, 4))
    hidden = heads * rng.choice((8, 12, 16, 24))
    lora = rng.random() < 0.5
    model = {"hidden_size": hidden, "heads": heads, "kv_heads": rng.choice([k for k in (1, 2, 4) if heads % k == 0]),
             "layers": rng.randint(1, 3), "intermediate_size": rng.choice((64, 96, 128, 176, 256)),
             "vocab_size": rng.choice((256, 384, 512, 1024)), "tie_embeddings": rng.random() < 0.5,
             "attn_implementation": rng.choice(("sdpa", "eager")), "activation_checkpointing": rng.random() < 0.3}
    lm = {"model": model, "finetune": "lora" if lora else "full", "seq_len": rng.choice((8, 16, 32, 64, 96, 128, 192)),
          "tokenizer": rng.choice(("auto", "byte")), "text_field": rng.choice(("text", "body")),
          "val_fraction": rng.choice((0.02, 0.05, 0.2)), "val_samples": rng.randint(1, 16),
          "corpus_bytes": rng.choice((100_000, 300_000))}
    if lora:
        lm["lora"] = {"r": rng.choice((1, 2, 4, 8)), "alpha": rng.choice((1.0, 8.0, 32.0)),
                      "dropout": rng.choice((0.0, 0.0, 0.05, 0.1, 0.3)), "targets": rng.choice(_TARGETS),
                      "train_norms": rng.random() < 0.5, "plus_ratio": rng.choice((1.0, 16.0))}
    return "tiny", {"lm": lm}


def _sensorlm(rng: random.Random) -> tuple[str, dict]:
    heads = rng.choice((2, 4))
    backend = rng.choice(("sdpa", "math", "chunked"))
    model = {"dim": heads * rng.choice((8, 16, 24)), "depth": rng.randint(1, 3), "heads": heads,
             "patch_time": rng.choice((30, 60, 120)), "patch_channels": rng.choice((4, 8)),
             "attn_backend": backend, "attn_chunk": rng.choice((8, 16, 32)),
             "activation_checkpointing": rng.random() < 0.3, "text_view": rng.choice(("clean", "masked")),
             "dropout": rng.choice((0.0, 0.0, 0.1)), "contrastive_encoder_grad": rng.choice((1.0, 1.0, 0.5, 0.0))}
    return "demo", {"sensorlm": {"model": model, "data": {"minutes": rng.choice((480, 1440))}}}


def _toy(rng: random.Random) -> tuple[str, dict]:
    return "demo", {"toy": {"dim": rng.choice((16, 32, 64, 128, 256)), "depth": rng.randint(1, 4),
                            "channels": rng.choice((2, 4, 8)), "length": rng.choice((32, 64, 128, 256)),
                            "dropout": rng.choice((0.0, 0.0, 0.2))}}


def _gapfill(rng: random.Random) -> tuple[str, dict]:
    depth = rng.choice((1, 2))
    return "demo", {"gapfill": {"model": {"base": rng.choice((4, 8, 16)), "depth": depth},
                                "samples": {"neighbours": rng.choice((1, 2, 3))},
                                "synthetic": {"size": rng.choice((16, 32)), "days": 2, "val_every": 2}}}


_DRAW = {"lm": _lm, "sensorlm": _sensorlm, "toy": _toy, "gapfill": _gapfill}
#: Largest batch drawn per task (three real steps of each must stay cheap on a CPU).
_MAX_BATCH = {"lm": 8, "sensorlm": 12, "toy": 256, "gapfill": 6}
#: The data path's settings: built inline, on the builder thread, in one or two worker processes, or planned.
_DATA_PATHS = ({"prefetch": False}, {"data_workers": 0}, {"data_workers": 1}, {"data_workers": 2},
               {"data_workers": -1})


def configs(task: str, n: int, seed: int = 0) -> list[tuple[str, object]]:
    """``n`` seeded random (label, RunConfig) pairs of ``task``; the same seed draws the same configs."""
    from engine.core.config import load

    rng = random.Random(f"{task}-{seed}")
    out = []
    while len(out) < n:
        preset, overrides = _DRAW[task](rng)
        batch = rng.randint(2 if task == "sensorlm" else 1, _MAX_BATCH[task])
        overrides["train"] = {"batch_size": batch, "grad_accum": rng.choice((1, 1, 2)) if batch > 1 else 1}
        overrides["runtime"] = {"precision": "fp32", "device": "cpu", **rng.choice(_DATA_PATHS)}
        config = load(task=task, preset=preset, overrides=overrides)
        out.append((f"{task} #{len(out)} " + json.dumps(overrides, sort_keys=True, separators=(",", ":")), config))
    return out


def predict(config, in_process: bool = False) -> tuple[int, str]:
    """(bytes, source) of the start guard's prediction: the analytic bound where the task has one, else the trace,
    both with the batches the data path builds ahead (``in_process``: the trace in this process, as a test
    runs it, instead of the guard's subprocess)."""
    from engine.budget import ahead, analytic, trace

    if analytic.has_model(config):
        return analytic.estimate(config, device="cpu").total, "analytic"
    if in_process:
        from engine.budget.trace_worker import trace as trace_here

        result = trace_here(config, "cpu")
        return result["peak"] + ahead.ahead_bytes(config, "cpu", result["batch_bytes"])[1], "trace"
    with tempfile.TemporaryDirectory() as cache:
        return trace.trace(config, cache_dir=cache, use_cache=False).total, "trace"


def measure(label: str, config) -> dict:
    """One config: prediction and the dispatcher-counted truth of three steps; error in percent of the truth."""
    import torch

    from engine.budget import ahead, truth

    torch.set_num_threads(1)
    predicted, source = predict(config)
    real = truth.peak(config, "dispatcher", steps=3, ahead=ahead.of(config))
    return {"config": label, "predicted": predicted, "source": source, "truth": real,
            "error": (predicted - real) / real * 100}


def worst(rows: list[dict]) -> tuple[dict, dict]:
    """(lowest, highest) error rows."""
    return min(rows, key=lambda r: r["error"]), max(rows, key=lambda r: r["error"])


def table(by_task: dict[str, list[dict]]) -> str:
    """Per task: configs, how many were under the truth and how many over +10 %, the source, the lowest and the
    highest error with the config that gave it."""
    out = ["| task | configs | under | over +10 % | prediction | lowest (config) | highest (config) |",
           "|---|---:|---:|---:|---|---|---|"]
    for task, rows in by_task.items():
        low, high = worst(rows)
        under, over = sum(r["error"] < 0 for r in rows), sum(r["error"] > 10 for r in rows)
        out.append(f"| {task} | {len(rows)} | {under} | {over} | {rows[0]['source']} | {low['error']:+.2f} % "
                   f"(`{low['config']}`) | {high['error']:+.2f} % (`{high['config']}`) |")
    return "\n".join(out)


def run(quick: bool = False, n: int = 30, seed: int = 0) -> Section:
    """Benchmark-suite entry point: ``n`` configs per task (--quick: 3; smoke: 1 of the toy)."""
    from bench.common import verdict

    tasks = ("toy",) if smoke() else TASKS
    count = 1 if smoke() else 3 if quick else n
    by_task = {task: [measure(*c) for c in configs(task, count, seed)] for task in tasks}
    rows = [r for rows in by_task.values() for r in rows]
    verdicts = [verdict("random configs, lowest error (CPU fp32)", min(r["error"] for r in rows), 0.0, True, " %"),
                verdict("random configs, highest error (CPU fp32)", max(r["error"] for r in rows), 10.0, False,
                        " %")]
    body = table(by_task) + "\n\n" + (
        f"Seeded random configurations (seed {seed}), {count} per task: prediction (the analytic bound, or the "
        "trace where a task has no closed form) against three real steps counted through the dispatcher, CPU "
        "fp32. Never under and at most +10 % is the budget's contract.")
    return Section("Memory prediction on random configurations",
                   f"python -m bench --only memory_random{' --quick' if quick else ''}", body, verdicts)


def main(argv: list[str] | None = None) -> int:
    """Print the section as markdown (``--json``: every row)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--n", type=int, default=30, help="configs per task (default 30)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--task", choices=TASKS, action="append", help="only these tasks (repeatable)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.task:
        by_task = {}
        for task in args.task:
            by_task[task] = []
            for label, config in configs(task, 3 if args.quick else args.n, args.seed):
                row = measure(label, config)
                by_task[task].append(row)
                print(f"{row['error']:+7.2f} %  {row['source']:8s} {label}", file=sys.stderr, flush=True)
        print(json.dumps(by_task, indent=1) if args.json else table(by_task))
        return 0
    section = run(args.quick, args.n, args.seed)
    section.show()
    return 0


if __name__ == "__main__":
    sys.exit(main())
