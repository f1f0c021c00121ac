"""Optimizer state restored from a checkpoint takes its parameter's memory layout, so fused AdamW resumes exactly."""

from __future__ import annotations

import copy

import torch

from engine.checkpoint import format as ckpt


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.GELU(),
                                torch.nn.Conv2d(8, 3, 3, padding=1))
    for p in model.parameters():
        if p.dim() == 4:  # the gap-filler's weights are channels-last
            p.data = p.data.contiguous(memory_format=torch.channels_last)
    return model


def _train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: range) -> None:
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    for step in steps:
        target = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(step))
        loss = (model(x) - target).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def test_fused_adamw_resumes_bit_exact_beside_channels_last_weights():
    whole = _model()
    whole_opt = torch.optim.AdamW(whole.parameters(), lr=1e-2, fused=True)
    _train(whole, whole_opt, range(3))
    tensors, meta = ckpt.optimizer_tensors(whole_opt)
    saved = {name: t.contiguous().clone() for name, t in tensors.items()}  # as a file gives them back: row-major
    resumed = copy.deepcopy(whole)
    resumed_opt = torch.optim.AdamW(resumed.parameters(), lr=1e-2, fused=True)
    ckpt.restore_optimizer(resumed_opt, saved, copy.deepcopy(meta))
    _train(whole, whole_opt, range(3, 6))
    _train(resumed, resumed_opt, range(3, 6))
    for a, b in zip(whole.parameters(), resumed.parameters()):
        assert torch.equal(a, b)
