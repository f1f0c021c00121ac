"""SensorLM throughput: data generation (samples/s) vs training (samples/s) for a preset, on this CPU.

    python bench/sensorlm_throughput.py [--preset demo] [--threads 1] [--steps 30]

Data: ``make_batch`` of fresh training windows (generation + captions + tokenising + normalising).
Training: forward + backward + AdamW step on pre-built batches (data cost excluded), and the two
together as a hand loop would see them. Wall-clock numbers vary with the machine's load; CPU-second rates much less.
"""

from __future__ import annotations

import argparse
import time

import torch

from engine.config import load
from engine.tasks.sensorlm import SensorLMTask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = load(preset=args.preset)
    task = SensorLMTask(config)
    started = time.perf_counter()
    task.setup()
    setup_s = time.perf_counter() - started
    B = config.train.batch_size
    torch.manual_seed(0)
    model = task.build_model()
    opt = torch.optim.AdamW(model.parameters(), lr=config.train.lr)

    started, cpu = time.perf_counter(), time.process_time()
    batches = [task.make_batch(range(s * B, (s + 1) * B), s, True) for s in range(args.steps)]
    data_s, data_cpu = time.perf_counter() - started, time.process_time() - cpu

    def step(batch, k):
        loss, _ = task.loss(model, batch, k)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step(batches[0], 0)  # warm-up (allocator, lazy inits, Adam state)
    started, cpu = time.perf_counter(), time.process_time()
    for k, batch in enumerate(batches):
        step(batch, k)
    train_s, train_cpu = time.perf_counter() - started, time.process_time() - cpu
    n = args.steps * B
    print(f"preset={args.preset} threads={args.threads} batch={B} params={sum(p.numel() for p in model.parameters())}")
    print(f"setup (fit tokenizer + stats): {setup_s:.2f} s")
    # CPU seconds as well as wall seconds: on a shared box the wall clock mostly measures the neighbours.
    print(f"data:   {n / data_s:8.1f} samples/s wall, {n / data_cpu:8.1f} per CPU-second "
          f"({data_s / args.steps * 1000:.1f} ms per batch)")
    print(f"train:  {n / train_s:8.1f} samples/s wall, {n / train_cpu:8.1f} per CPU-second "
          f"({args.steps / train_s:.2f} steps/s, data excluded)")
    both = data_s + train_s
    print(f"both:   {n / both:8.1f} samples/s  ({args.steps / both:.2f} steps/s, serial)")


if __name__ == "__main__":
    main()
