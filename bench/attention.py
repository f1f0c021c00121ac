"""Attention backends of the sensor encoder: time per training step and peak memory, `python -m bench.attention`.

Two shapes of the SensorLM task, width and depth reduced so that the math
backend's N×N tensors fit a 2-core CPU box in seconds (stated in the table):

- the reference input (``base``'s): 1440 min × 34 channels in 10 × 2 patches = 2448 tokens;
- a short sequence: 1440 × 32 in 60 × 4 patches = 192 tokens (the first ``demo`` shape).

Variants: ``sdpa`` (fused), ``math`` (softmax(QKᵀ)V spelt out; the
baseline of every ratio), ``chunked`` (query chunks, each under a checkpoint:
its scores are recomputed in backward) and **seed** — the obvious chunking an
earlier design shipped, query chunks of the same size WITHOUT recompute, on
the un-copied q/k/v views (each chunk's softmax output stays saved for
backward, so the chunks add up to the whole N×N): it shows why ``chunked``
pays for a recompute. The seed variant exists only here: its models run ``seed_variant`` as their
attention function (``SensorLM.set_attention(function=…)``), which takes the
``chunked`` backend's place.

Time: one training step as the Trainer runs it (engine.budget.step: AdamW, clip,
two micro-batches never), median over interleaved rounds. Peak memory: **real
mode** — the allocator's own events under ``torch.profiler(profile_memory=True)``
over two optimizer steps plus the parameters (engine.budget.truth, "profiler"),
the same truth the memory-accuracy section uses; not a trace.
"""

from __future__ import annotations

import math
import statistics
import time

from bench.common import Section, fmt_stats, interleave, ratios, smoke, standalone, verdict

VARIANTS = ("math", "sdpa", "chunked", "seed")
#: The reduced model both shapes use (text side minimal: it is not what the backend changes).
MODEL = {"dim": 64, "depth": 2, "heads": 4, "text_dim": 64, "text_depth": 1, "decoder_depth": 1, "text_heads": 4,
         "embed_dim": 64, "max_caption_tokens": 48, "vocab_size": 512}
SHAPES = {
    "seed shape, 2448 tokens": {"data": {"channels": 34, "minutes": 1440},
                                "model": {"patch_time": 10, "patch_channels": 2, "attn_chunk": 256}, "batch": 2},
    "short, 192 tokens": {"data": {"channels": 32, "minutes": 1440},
                          "model": {"patch_time": 60, "patch_channels": 4, "attn_chunk": 64}, "batch": 16},
}


def seed_attention(q, k, v, chunk: int):
    """Query chunking without recompute: per chunk softmax(q_c·kᵀ/√d)·v, no checkpoint, no contiguous K/V."""
    import torch

    scale = 1.0 / math.sqrt(q.shape[-1])
    return torch.cat([torch.softmax(q[:, :, a:a + chunk] @ k.transpose(-2, -1) * scale, dim=-1) @ v
                      for a in range(0, q.shape[2], chunk)], dim=2)


def seed_variant(q, k, v, backend: str, chunk: int):
    """The sensor encoder's attention function with its ``chunked`` backend run as ``seed_attention``."""
    from engine.tasks.sensorlm.model import attention

    return seed_attention(q, k, v, chunk) if backend == "chunked" else attention(q, k, v, backend, chunk)


def config_for(shape: dict, batch: int | None = None):
    """The RunConfig of one shape (the backend is set on the built model: one task serves every variant)."""
    from engine.core.config import load

    return load(preset="demo", task="sensorlm", overrides={
        "model": {**MODEL, **shape["model"]}, "data": shape["data"],
        "train": {"batch_size": batch or shape["batch"]}, "runtime": {"precision": "fp32"}})


def _model(task, variant: str):
    """A fresh model of ``task`` with the variant's backend (``seed``: ``chunked`` run by ``seed_variant``)."""
    import torch

    torch.manual_seed(0)
    model = task.build_model()
    if variant == "seed":
        model.set_attention(backend="chunked", function=seed_variant)
    else:
        model.set_attention(backend=variant)
    return model


class Stepper:
    """A model and optimizer for one variant on a shared task; ``step()`` times one training step."""

    def __init__(self, task, config, variant: str) -> None:
        from engine.budget import step as stepmod

        self.variant, self.config, self.task = variant, config, task
        self.model = _model(task, variant)
        self.optimizer = stepmod.make_optimizer(self.model, config)
        B = config.train.batch_size
        self.batches = [task.make_batch(list(range(s * B, (s + 1) * B)), s, True) for s in range(2)]
        self.count = 0
        self.step()  # warm-up: Adam state, the allocator, and (chunked) the checkpoint's one-off dynamo import

    def step(self) -> float:
        """Seconds of one step (forward, backward, clip, AdamW), the way engine.budget.step runs it."""
        from engine.budget import step as stepmod

        batch = self.batches[self.count % 2]
        self.count += 1
        start = time.perf_counter()
        stepmod.run_steps(self.task, self.model, self.optimizer, self.config, "cpu",
                          lambda step, indices: batch, steps=1)
        return time.perf_counter() - start


def peak_bytes(task, config, variant: str) -> int:
    """Real-mode peak of two optimizer steps of a fresh model: parameters + the allocator's events' peak.

    The same measurement as engine.budget.truth.peak(…, "profiler") (its helpers), on this bench's shared
    task so the seed variant can be swapped in; each micro-batch is copied in, as truth does.
    """
    from engine.budget import step as stepmod
    from engine.budget.truth import profiler_peak, unique_bytes

    model = _model(task, variant)
    optimizer = stepmod.make_optimizer(model, config)
    B = config.train.batch_size
    made = [task.make_batch(list(range(s * B, (s + 1) * B)), s, True) for s in range(2)]

    def run() -> None:
        stepmod.run_steps(task, model, optimizer, config, "cpu",
                          lambda step, indices: {k: v.clone() for k, v in made[step].items()}, steps=2)

    return unique_bytes(list(model.parameters()) + list(model.buffers())) + profiler_peak(run)


def measure_shape(shape: dict, rounds: int, steps_per_round: int, batch: int | None = None) -> dict:
    """variant → {'s': [seconds per step per round], 'peak': bytes} for one shape."""
    from engine.core.registry import load_task_class

    config = config_for(shape, batch)
    task = load_task_class(config.task.name)(config)
    task.setup()  # fits the tokenizer and channel statistics: seconds, so once per shape
    steppers = {v: Stepper(task, config, v) for v in VARIANTS}
    times = interleave({v: (lambda s=steppers[v]: statistics.median(s.step() for _ in range(steps_per_round)))
                        for v in VARIANTS}, rounds)
    del steppers
    return {v: {"s": times[v], "peak": peak_bytes(task, config, v)} for v in VARIANTS}


def run(quick: bool = False) -> Section:
    """Suite entry: both shapes; full 5 rounds × 2 steps, quick 2 × 1 at batch 1 (smoke: the short shape, batch 2)."""
    import torch

    torch.set_num_threads(1)
    if smoke():
        plan = {"short, 192 tokens": 2}
        rounds, per_round = 1, 1
    else:
        # --quick halves the long shape's batch: its math steps are the suite's slowest (~5 s each on a loaded box).
        plan = {name: (1 if quick and name.startswith("seed") else None) for name in SHAPES}
        rounds, per_round = (2, 1) if quick else (5, 2)
    lines, verdicts = [], []
    for name, batch in plan.items():
        shape = SHAPES[name]
        results = measure_shape(shape, rounds, per_round, batch)
        base_s, base_peak = results["math"]["s"], results["math"]["peak"]
        c = config_for(shape, batch)
        tc = c.task_config
        n = (tc.data.minutes // tc.model.patch_time) * (tc.data.channels // tc.model.patch_channels)
        lines += [f"**{name}** — {tc.data.minutes}×{tc.data.channels} input, {tc.model.patch_time}×"
                  f"{tc.model.patch_channels} patches = {n} tokens; dim {tc.model.dim}, depth {tc.model.depth}, "
                  f"{tc.model.heads} heads, chunk {tc.model.attn_chunk}, batch {c.train.batch_size}, fp32", "",
                  "| backend | s / step | ÷ math | peak MiB (real, profiler) | ÷ math |", "|---|---:|---:|---:|---:|"]
        for v in VARIANTS:
            r = results[v]
            label = "seed (chunks, no recompute)" if v == "seed" else v
            lines.append(f"| {label} | {fmt_stats(r['s'], '.3f')} | {fmt_stats(ratios(r['s'], base_s), '.2f')} | "
                         f"{r['peak'] / 2**20:,.1f} | {r['peak'] / base_peak:.2f} |")
        lines.append("")
        if name.startswith("seed shape"):  # the engine's claim; the seed row is context (it is expected ≈ math)
            verdicts.append(verdict(f"chunked ÷ math peak memory, {n} tokens", results["chunked"]["peak"] / base_peak,
                                    1.0, higher_is_better=False, unit="×"))
    body = "\n".join(lines) + (
        f"\nTime: median (min–max) over {rounds} interleaved round(s) of {per_round} step(s), 1 torch thread, "
        "after a warm-up step; ratios per round. Peak: allocator events of two real optimizer steps plus the "
        "parameters (torch.profiler, engine.budget.truth) — measured, not traced. The seed variant is this "
        "bench's chunking without per-chunk recompute (what an earlier design did); `chunked` is the engine's.")
    return Section("Attention backends: step time and peak memory",
                   f"python -m bench --only attention{' --quick' if quick else ''}", body, verdicts)


def main() -> None:
    """Command line: print the section."""
    standalone(run, __doc__)


if __name__ == "__main__":
    main()
