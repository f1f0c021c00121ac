"""engine.optim.clipping: torch's clip numbers bit for bit, on its own fast path where it can, torch's elsewhere;
and Optimization.zero_grad leaves what ``optimizer.zero_grad(set_to_none=True)`` leaves."""

from __future__ import annotations

import math

import pytest
import torch

from engine.core import config as cfg
from engine.optim.clipping import GradClipper
from engine.optim.optimization import Optimization

SHAPES = [(16, 240), (16,), (120, 16), (120,)]


def _params(dtype=torch.float32) -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(torch.zeros(shape, dtype=dtype)) for shape in SHAPES]


def _grads(params, seed: int, scale: float, poison: float | None = None) -> None:
    generator = torch.Generator().manual_seed(seed)
    for p in params:
        p.grad = (torch.randn(p.shape, generator=generator) * scale).to(p.dtype)
    if poison is not None:
        params[2].grad[3, 4] = poison


@pytest.mark.parametrize("scale, max_norm, poison", [
    (1.0, 1.0, None),          # clipped: the norm is ~30
    (1e-3, 1.0, None),         # under the limit: multiplied by exactly 1
    (1.0, math.inf, None),     # no clip configured
    (1.0, 1.0, float("nan")),  # a NaN gradient: torch turns every gradient into NaN, and so must this
    (1.0, math.inf, float("inf")),
])
def test_the_norm_and_the_clipped_gradients_are_torchs_bit_for_bit(scale, max_norm, poison, monkeypatch) -> None:
    ours, theirs = _params(), _params()
    _grads(ours, 7, scale, poison)
    _grads(theirs, 7, scale, poison)
    expected = torch.nn.utils.clip_grad_norm_(theirs, max_norm)

    def refuse(*args, **kwargs):
        raise AssertionError("the fast path fell back to torch.nn.utils.clip_grad_norm_")

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", refuse)
    norm = GradClipper(ours)(max_norm)
    assert torch.equal(norm, expected) or (norm.isnan() and expected.isnan())
    for mine, reference in zip(ours, theirs):
        assert torch.equal(mine.grad.nan_to_num(), reference.grad.nan_to_num())
        assert torch.equal(mine.grad.isnan(), reference.grad.isnan())


def test_what_the_fast_path_does_not_know_goes_through_torch(monkeypatch) -> None:
    """A parameter without a gradient (frozen this step) and a group of two dtypes take torch's function."""
    calls = []
    real = torch.nn.utils.clip_grad_norm_

    def counted(params, max_norm):
        calls.append(len(list(params)))
        return real(params, max_norm)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", counted)
    missing = _params()
    _grads(missing, 1, 1.0)
    missing[1].grad = None
    reference = _params()
    _grads(reference, 1, 1.0)
    reference[1].grad = None
    expected = real(reference, 1.0)
    assert torch.equal(GradClipper(missing)(1.0), expected)
    mixed = [*_params(), torch.nn.Parameter(torch.zeros(8, dtype=torch.float64))]
    _grads(mixed, 2, 1.0)
    GradClipper(mixed)(1.0)
    assert calls == [4, 5]
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(missing, reference) if a.grad is not None)


def test_zero_grad_drops_every_optimized_gradient_and_only_those(monkeypatch) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    frozen = model[0].bias
    groups = [{"params": [p for p in model.parameters() if p is not frozen]}]
    config = cfg.load(task="toy", preset="demo")
    optim = Optimization(config.optimizer, config.schedule, "fp32", model, groups, torch.device("cpu"),
                         total_steps=10)
    model(torch.randn(5, 4)).sum().backward()
    frozen_grad = frozen.grad
    monkeypatch.setattr(optim.optimizer, "zero_grad",
                        lambda *a, **k: pytest.fail("the optimizer's zero_grad (its ~40 µs) was called"))
    optim.zero_grad()
    assert [p.grad for p in groups[0]["params"]] == [None, None, None]
    assert frozen.grad is frozen_grad  # not the optimizer's: optimizer.zero_grad leaves it too


def test_the_optimizer_step_clips_on_the_fast_path_with_torchs_norm(monkeypatch) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    config = cfg.load(task="toy", preset="demo")
    optim = Optimization(config.optimizer, config.schedule, "fp32", model, [{"params": list(model.parameters())}],
                         torch.device("cpu"), total_steps=10)
    loss = (model(torch.randn(5, 4)) * 100).sum()
    loss.backward()
    copies = [p.grad.clone() for p in model.parameters()]
    expected = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in copies]))
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_",
                        lambda *a, **k: pytest.fail("the step fell back to torch.nn.utils.clip_grad_norm_"))
    (_, grad_norm, _), _, skipped = optim.step(1, loss.detach(), {}, lambda finite: not finite)
    assert not skipped and grad_norm == pytest.approx(float(expected), rel=1e-6) and grad_norm > 1.0


def test_gradients_made_with_create_graph_are_clipped_without_recording_the_clip() -> None:
    def made(seed: int) -> list[torch.nn.Parameter]:
        torch.manual_seed(seed)
        layer = torch.nn.Linear(6, 4)
        (layer(torch.randn(3, 6)) ** 2).sum().backward(create_graph=True)  # gradients with a graph of their own
        return list(layer.parameters())

    ours, theirs = made(3), made(3)
    assert ours[0].grad.requires_grad
    expected = torch.nn.utils.clip_grad_norm_(theirs, 0.5)
    norm = GradClipper(ours)(0.5)
    assert not norm.requires_grad and norm.grad_fn is None and torch.equal(norm, expected)
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(ours, theirs))
