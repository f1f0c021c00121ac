"""SensorLM throughput: data generation (samples/s) vs training (samples/s) for a preset, on this CPU.

    python bench/sensorlm_throughput.py [--preset demo] [--threads 1] [--steps 30]
    python -m bench --only sensorlm_throughput [--quick]      (as a suite section)

Data: ``make_batch`` of fresh training windows (generation + captions + tokenising + normalising).
Training: forward + backward + AdamW step on pre-built batches (data cost excluded), and the two
together as a hand loop would see them. Wall-clock numbers vary with the machine's load; CPU-second rates much less.
"""

from __future__ import annotations

import argparse
import time

import torch

from bench.common import Section, fmt_stats, interleave, ratios, smoke, stats
from engine.core.config import load
from engine.tasks.sensorlm import SensorLMTask


def measure(preset: str, threads: int, steps: int, rounds: int = 1) -> dict:
    """Set-up seconds, then per round (data, train alternating): wall and CPU seconds of ``steps`` batches each."""
    torch.set_num_threads(threads)
    config = load(preset=preset)
    task = SensorLMTask(config)
    started = time.perf_counter()
    task.setup()
    setup_s = time.perf_counter() - started
    B = config.train.batch_size
    torch.manual_seed(0)
    model = task.build_model()
    opt = torch.optim.AdamW(model.parameters(), lr=config.optimizer.lr)
    made: list = []

    def step(batch, k):
        loss, _ = task.loss(model, batch, k)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def data() -> tuple[float, float]:
        first = len(made) * steps
        started, cpu = time.perf_counter(), time.process_time()
        made.append([task.make_batch(range((first + s) * B, (first + s + 1) * B), first + s, True)
                     for s in range(steps)])
        return time.perf_counter() - started, time.process_time() - cpu

    def train() -> tuple[float, float]:
        batches = made[-1] if made else [task.make_batch(range(s * B, (s + 1) * B), s, True) for s in range(steps)]
        started, cpu = time.perf_counter(), time.process_time()
        for k, batch in enumerate(batches):
            step(batch, k)
        return time.perf_counter() - started, time.process_time() - cpu

    data()
    step(made[0][0], 0)  # warm-up (allocator, lazy inits, Adam state)
    timed = interleave({"data": data, "train": train}, rounds)
    return {"preset": preset, "threads": threads, "batch": B, "steps": steps, "setup_s": setup_s,
            "params": sum(p.numel() for p in model.parameters()), **timed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    r = measure(args.preset, args.threads, args.steps)
    (data_s, data_cpu), (train_s, train_cpu) = r["data"][0], r["train"][0]
    n = args.steps * r["batch"]
    print(f"preset={args.preset} threads={args.threads} batch={r['batch']} params={r['params']}")
    print(f"setup (fit tokenizer + stats): {r['setup_s']:.2f} s")
    # CPU seconds as well as wall seconds: on a shared box the wall clock mostly measures the neighbours.
    print(f"data:   {n / data_s:8.1f} samples/s wall, {n / data_cpu:8.1f} per CPU-second "
          f"({data_s / args.steps * 1000:.1f} ms per batch)")
    print(f"train:  {n / train_s:8.1f} samples/s wall, {n / train_cpu:8.1f} per CPU-second "
          f"({args.steps / train_s:.2f} steps/s, data excluded)")
    both = data_s + train_s
    print(f"both:   {n / both:8.1f} samples/s  ({args.steps / both:.2f} steps/s, serial)")


def run(quick: bool = False) -> Section:
    """Suite entry: `demo`, 1 thread, data and training rounds interleaved (full 4 × 20 steps, quick 2 × 8)."""
    steps, rounds = (2, 1) if smoke() else (8, 2) if quick else (20, 4)
    r = measure("demo", 1, steps, rounds)
    n = steps * r["batch"]
    rate = {k: [n / w for w, _ in r[k]] for k in ("data", "train")}
    cpu_rate = {k: [n / c for _, c in r[k]] for k in ("data", "train")}
    share = [t / (d + t) for (d, _), (t, _) in zip(r["data"], r["train"])]
    body = "\n".join([
        f"`demo` preset ({r['params'] / 1e6:.2f} M parameters), batch {r['batch']}, 1 torch thread; {rounds} "
        f"interleaved rounds of {steps} batches made, then {steps} training steps on them "
        f"(tokenizer + statistics set-up: {r['setup_s']:.1f} s, once).", "",
        "| stage | samples/s (wall) | samples per CPU-second |", "|---|---:|---:|",
        f"| data: `make_batch` (generate, caption, tokenise, normalise) | {fmt_stats(rate['data'], '.0f')} | "
        f"{fmt_stats(cpu_rate['data'], '.0f')} |",
        f"| training: forward + backward + AdamW (data excluded) | {fmt_stats(rate['train'], '.0f')} | "
        f"{fmt_stats(cpu_rate['train'], '.0f')} |",
        f"| **data ÷ training** (per round) | **{fmt_stats(ratios(rate['data'], rate['train']), '.1f')}** | |",
        "", f"Made in the loop, data takes {100 - stats(share)[1] * 100:.0f} % of a serial step "
            f"({fmt_stats([100 - s * 100 for s in share], '.0f')} %).",
    ])
    return Section("SensorLM: data generation vs training throughput",
                   f"python -m bench --only sensorlm_throughput{' --quick' if quick else ''}", body)


if __name__ == "__main__":
    main()
