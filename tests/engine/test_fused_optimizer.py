"""The run's AdamW is the fused kernel where the run allows it, and the analytic budget counts it that way."""

from __future__ import annotations

import torch

from engine.budget import analytic
from engine.core import config as cfg
from engine.optim.optimization import adamw


def _groups() -> list[dict]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    return [{"params": list(model.parameters()), "weight_decay": 0.0}]


def test_cpu_fp32_and_bf16_runs_step_with_fused_adamw_and_fp16_does_not():
    for precision, fused in (("fp32", True), ("bf16", True), ("fp16", None)):
        optimizer = cfg.load(task="toy").optimizer
        assert adamw(_groups(), optimizer, precision).defaults["fused"] is fused, precision


def test_fused_steps_match_the_loop_to_float_rounding():
    config = cfg.load(task="toy")
    optimizer = config.optimizer
    groups, reference = _groups(), _groups()
    fused = adamw(groups, optimizer, config.runtime.precision)
    loop = torch.optim.AdamW(reference, lr=optimizer.lr, betas=tuple(optimizer.betas), eps=optimizer.eps, foreach=False)
    for _ in range(3):
        for group in (groups, reference):
            for p in group[0]["params"]:
                p.grad = torch.ones_like(p)
        fused.step()
        loop.step()
    for a, b in zip(groups[0]["params"], reference[0]["params"]):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_the_analytic_budget_drops_the_loop_transient_only_where_fused_runs():
    config = cfg.load(task="toy", overrides={"train": {"batch_size": 64}})
    fused = analytic.estimate(config, device="cpu", precision="fp32")
    unfused = analytic.estimate(config, device="cpu", precision="fp16")
    assert fused.breakdown.get("optimizer transient", 0) == 0
    assert unfused.breakdown.get("optimizer transient", 0) > 0
