"""The step's clip and zero_grad, through Optimization: the norm it logs and the gradients the optimizer steps
with are ``torch.nn.utils.clip_grad_norm_``'s bit for bit, on both readback paths and at the limit's edge; and
``zero_grad`` leaves what ``optimizer.zero_grad(set_to_none=True)`` leaves."""

from __future__ import annotations

import math

import pytest
import torch

from engine.core import config as cfg
from engine.optim.clipping import GradClip
from engine.optim.optimization import Optimization

SHAPES = [(16, 240), (16,), (120, 16), (120,)]


class Model(torch.nn.Module):
    """Four parameters of the fast toy's shapes, in a fixed order."""

    def __init__(self, dtype=torch.float32) -> None:
        super().__init__()
        self.weights = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(s, dtype=dtype)) for s in SHAPES])


def _grads(params, seed: int, scale: float, poison: float | None = None) -> None:
    generator = torch.Generator().manual_seed(seed)
    for p in params:
        p.grad = (torch.randn(p.shape, generator=generator) * scale).to(p.device, p.dtype)
    if poison is not None:
        params[2].grad[3, 4] = poison


def _optimization(model: torch.nn.Module, clip: float, read: str = "each", device: str = "cpu") -> Optimization:
    config = cfg.load(task="toy", preset="demo", overrides={"optimizer": {"clip_grad_norm": clip}})
    optim = Optimization(config.optimizer, config.schedule, "fp32", model, [{"params": list(model.parameters())}],
                         torch.device(device), total_steps=10)
    optim.host_read = read
    return optim


def _norm_of(scale: float, seed: int = 7) -> float:
    reference = list(Model().parameters())
    _grads(reference, seed, scale)
    return float(torch.nn.utils.get_total_norm([p.grad for p in reference]))


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit, NaN where NaN."""
    return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())


#: (gradient scale, clip limit, a poisoned gradient): the limit is 1.0 unless the case says otherwise.
CASES = {
    "clipped": (1.0, 1.0, None),                     # the norm is ~30
    "under the limit": (1e-3, 1.0, None),            # the factor is 1.0: torch multiplies, the step need not
    "no clip configured": (1.0, 0.0, None),
    "a NaN gradient": (1.0, 1.0, float("nan")),      # torch turns every gradient into NaN, and so must the step
    "an inf gradient, no clip": (1.0, 0.0, float("inf")),
    "at the limit": (None, "norm", None),            # norm == limit: torch's factor is 1 / (1 + 1e-6), not 1
    "a hair under the limit": (None, "norm+1e-7", None),
}


@pytest.mark.parametrize("read", ["each", "stacked"])
@pytest.mark.parametrize("case", list(CASES))
def test_the_step_logs_torchs_norm_and_steps_with_torchs_clipped_gradients(case: str, read: str) -> None:
    scale, limit, poison = CASES[case]
    if scale is None:  # the limit is placed at the norm itself
        scale = 0.02  # a norm of ~0.6, where the 1e-6 in torch's factor is more than float32's rounding
        norm = _norm_of(scale)
        limit = norm if limit == "norm" else norm + 1e-7
    model, theirs = Model(), list(Model().parameters())
    ours = list(model.parameters())
    _grads(ours, 7, scale, poison)
    _grads(theirs, 7, scale, poison)
    expected = torch.nn.utils.clip_grad_norm_(theirs, limit if limit > 0 else math.inf)
    seen: list[torch.Tensor] = []
    optim = _optimization(model, limit, read)
    optim.optimizer.register_step_pre_hook(lambda *_: seen.extend(p.grad.clone() for p in ours))
    (loss, grad_norm, _), _, skipped = optim.step(0, torch.tensor(1.0), {}, lambda finite: False)
    assert grad_norm == float(expected) or (math.isnan(grad_norm) and expected.isnan())
    assert len(seen) == len(theirs) and all(_same(mine, reference.grad) for mine, reference in zip(seen, theirs))
    if case in ("at the limit", "a hair under the limit"):  # where torch scales although the norm is not over
        assert not torch.equal(theirs[0].grad, _unclipped(7, scale)[0])


def _unclipped(seed: int, scale: float) -> list[torch.Tensor]:
    params = list(Model().parameters())
    _grads(params, seed, scale)
    return [p.grad for p in params]


def test_the_deferred_step_clips_without_reading_the_norm() -> None:
    model, theirs = Model(), list(Model().parameters())
    ours = list(model.parameters())
    _grads(ours, 5, 1.0)
    _grads(theirs, 5, 1.0)
    expected = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    config = cfg.load(task="toy", preset="demo")
    optim = Optimization(config.optimizer, config.schedule, "fp32", model, [{"params": ours}], torch.device("cpu"),
                         total_steps=10)
    seen: list[torch.Tensor] = []
    optim.optimizer.register_step_pre_hook(lambda *_: seen.extend(p.grad.clone() for p in ours))
    values, _ = optim.step_on_device(0, torch.tensor(2.0), {})
    assert values[1].item() == expected.item() and values[2].item() == 1.0
    assert all(torch.equal(mine, reference.grad) for mine, reference in zip(seen, theirs))


def test_a_parameter_without_a_gradient_this_step_is_left_out_of_the_norm() -> None:
    model, theirs = Model(), list(Model().parameters())
    ours = list(model.parameters())
    _grads(ours, 1, 1.0)
    _grads(theirs, 1, 1.0)
    ours[1].grad = theirs[1].grad = None
    expected = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    (_, grad_norm, _), _, _ = _optimization(model, 1.0).step(0, torch.tensor(1.0), {}, lambda finite: False)
    assert grad_norm == expected.item() and ours[1].grad is None
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(ours, theirs) if a.grad is not None)


def test_zero_grad_drops_every_optimized_gradient_and_only_those() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    frozen = model[0].bias
    groups = [{"params": [p for p in model.parameters() if p is not frozen]}]
    config = cfg.load(task="toy", preset="demo")
    optim = Optimization(config.optimizer, config.schedule, "fp32", model, groups, torch.device("cpu"),
                         total_steps=10)
    model(torch.randn(5, 4)).sum().backward()
    frozen_grad = frozen.grad
    optim.zero_grad()
    assert [p.grad for p in groups[0]["params"]] == [None, None, None]
    assert frozen.grad is frozen_grad  # not the optimizer's: optimizer.zero_grad leaves it too


def test_gradients_made_with_create_graph_are_clipped_without_recording_the_clip() -> None:
    def made(seed: int) -> torch.nn.Linear:
        torch.manual_seed(seed)
        layer = torch.nn.Linear(6, 4)
        (layer(torch.randn(3, 6)) ** 2).sum().backward(create_graph=True)  # gradients with a graph of their own
        return layer

    ours, theirs = made(3), made(3)
    assert ours.weight.grad.requires_grad
    expected = torch.nn.utils.clip_grad_norm_(list(theirs.parameters()), 0.5)
    clip = GradClip(list(ours.parameters()), 0.5, torch.device("cpu"))
    norm = clip.norm()
    clip.apply(norm, read=norm.item())
    assert not norm.requires_grad and norm.grad_fn is None and torch.equal(norm, expected)
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(ours.parameters(), theirs.parameters()))


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["stacked", "deferred"])
@pytest.mark.parametrize("scale", [1.0, 1e-3])  # clipped, and under the limit
def test_on_cuda_the_step_clips_as_clip_grad_norm_does(path: str, scale: float) -> None:
    """torch's foreach kernels on CUDA (``foreach=None``: torch's choice), on the sync and the deferred readback."""
    model, theirs = Model().cuda(), list(Model().cuda().parameters())
    ours = list(model.parameters())
    _grads(ours, 9, scale)
    _grads(theirs, 9, scale)
    expected = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    optim = _optimization(model, 1.0, "stacked", device="cuda")
    seen: list[torch.Tensor] = []
    optim.optimizer.register_step_pre_hook(lambda *_: seen.extend(p.grad.clone() for p in ours))
    if path == "deferred":
        grad_norm = optim.step_on_device(0, torch.tensor(1.0, device="cuda"), {})[0][1].item()
    else:
        grad_norm = optim.step(0, torch.tensor(1.0, device="cuda"), {}, lambda finite: False)[0][1]
    assert grad_norm == expected.item()
    assert all(torch.equal(mine, reference.grad) for mine, reference in zip(seen, theirs))
