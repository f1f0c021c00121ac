"""Accuracy on CPU against the allocator's truth: traced within ±2 %, analytic never below and ≤ +10 %.

Truth is torch.profiler's allocation events replayed (engine.budget.truth),
independent of MemTracker. Small configs spanning batch, sequence length,
width, depth, the three attention backends, activation checkpointing,
gradient accumulation and dropout, plus the toy task; the large table is
bench/memory_accuracy.py.
"""

from __future__ import annotations

import pytest

from engine.budget import analytic, truth
from engine.budget.trace_worker import trace as trace_in_process
from tests.engine.budget.conftest import small

pytestmark = pytest.mark.slow

CASES = {
    "sdpa b2": {},
    "sdpa b1": {"train": {"batch_size": 1}},
    "sdpa b8": {"train": {"batch_size": 8}},
    "math b4": {"model": {"attn_backend": "math"}, "train": {"batch_size": 4}},
    "chunked c16 b4": {"model": {"attn_backend": "chunked", "attn_chunk": 16}, "train": {"batch_size": 4}},
    "ckpt sdpa b4": {"model": {"activation_checkpointing": True}, "train": {"batch_size": 4}},
    "ckpt math": {"model": {"activation_checkpointing": True, "attn_backend": "math"}},
    "long seq 192": {"data": {"minutes": 480}},
    "wide": {"model": {"dim": 64, "heads": 4, "text_dim": 48, "text_heads": 3}},
    "deep": {"model": {"depth": 3, "text_depth": 2, "decoder_depth": 2}},
    "grad accum": {"train": {"batch_size": 6, "grad_accum": 2}},
    "dropout": {"model": {"dropout": 0.1}},
    "pool grad 0.5": {"model": {"contrastive_encoder_grad": 0.5}, "train": {"batch_size": 4}},
    "pool grad 0": {"model": {"contrastive_encoder_grad": 0.0}, "train": {"batch_size": 4}},
    "masked view": {"model": {"text_view": "masked"}, "train": {"batch_size": 4}},
    "masked view ckpt": {"model": {"text_view": "masked", "activation_checkpointing": True}},
    # demo's shape: a patch spans every channel, so patchify is a view of a row-major x and a copy of the
    # channel-major x the task really makes (the trace must build its batches in the task's layout)
    "all-channel patches": {"model": {"patch_channels": 8}, "train": {"batch_size": 4}},
}
TOY = {"toy b64": {"train": {"batch_size": 64}}, "toy accum": {"train": {"batch_size": 50, "grad_accum": 4}}}


def _check(config) -> None:
    real = truth.peak(config, "profiler")
    traced = trace_in_process(config, "cpu")["peak"]
    bound = analytic.estimate(config, device="cpu").total
    assert abs(traced - real) <= 0.02 * real, (traced, real)
    assert bound >= real, f"analytic {bound} below truth {real}"
    assert bound <= 1.10 * real, f"analytic {bound} more than 10 % above truth {real} ({bound / real - 1:+.1%})"


@pytest.mark.parametrize("name", list(CASES))
def test_sensorlm_cpu_fp32(name: str) -> None:
    _check(small(**CASES[name]))


@pytest.mark.parametrize("name", list(TOY))
def test_toy_cpu_fp32(name: str) -> None:
    _check(small("toy", **TOY[name]))


def test_bf16_bound_is_never_below_the_trace() -> None:
    config = small(train={"batch_size": 4}, runtime={"precision": "bf16"})
    traced = trace_in_process(config, "cpu")["peak"]
    assert analytic.estimate(config, device="cpu").total >= traced
