"""The traced prediction of someone else's step, against the step's counted peak, and what tracing leaves alone."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from engine.app.integrations.memory import StepMemory
from engine.budget.cpu_meter import StepPeak, held_tensors
from engine.budget.trace_step import StepTraceError, trace_step


def _conv():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
    batch = (torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,)))
    return model, torch.optim.AdamW(model.parameters()), batch, \
        lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1])


def _transformer():
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.1)
    model = nn.Sequential(nn.TransformerEncoder(layer, 2), nn.Flatten(), nn.Linear(32 * 16, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), torch.randn(8, 16, 32), \
        lambda m, b: {"loss": m(b).pow(2).mean()}  # a step that returns a dict, as Lightning's may


def _counted_peak(model, optimizer, batch, loss_of) -> int:
    """The real step's peak (live storages counted through the dispatcher), the third step's: AdamW state exists."""
    peak = 0
    for _ in range(3):
        meter = StepPeak(held_tensors(model, optimizer))
        with meter:
            optimizer.zero_grad(set_to_none=True)
            out = loss_of(model, batch)
            (out["loss"] if isinstance(out, dict) else out).backward()
            optimizer.step()
        peak = meter.peak
    return peak


@pytest.mark.parametrize("build", [_conv, _transformer], ids=["conv", "transformer"])
def test_predicted_peak_is_never_under_and_at_most_ten_percent_over(build) -> None:
    torch.manual_seed(0)
    model, optimizer, batch, loss_of = build()
    memory = StepMemory(model, lambda: optimizer, "cpu")
    memory.predict(loss_of, batch)
    assert memory.why == "" and memory.summary().source == "trace"
    measured = _counted_peak(model, optimizer, batch, loss_of)
    assert measured <= memory.predicted <= 1.10 * measured


def test_tracing_leaves_the_model_the_optimizer_and_the_rng_as_they_were() -> None:
    torch.manual_seed(0)
    model, optimizer, batch, loss_of = _transformer()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.random.get_rng_state()
    model.eval()
    estimate = trace_step(model, optimizer, loss_of, batch)
    assert estimate.total > 0 and estimate.breakdown["optimizer"] > 0  # momentum buffers of the fake optimizer
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters()) and not optimizer.state
    assert torch.equal(rng, torch.random.get_rng_state()) and not model.training


def test_a_step_that_reads_a_value_is_measured_only_with_the_reason() -> None:
    model = nn.Linear(4, 1)

    def reads(m, b):
        out = m(b).mean()
        return out * 2 if out.item() > 0 else out  # data-dependent: a fake tensor has no value

    with pytest.raises(StepTraceError):
        trace_step(model, None, reads, torch.randn(2, 4))
    memory = StepMemory(model, lambda: None, "cpu")
    memory.predict(reads, torch.randn(2, 4))
    summary = memory.summary()
    assert memory.predicted is None and summary.source == "measured" and "could not be traced" in summary.note
