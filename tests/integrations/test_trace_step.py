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


class BuildsOnFirstForward(nn.Module):
    """State made by the first forward, as Lightning's basic transformer example makes ``src_mask`` and its
    positional table: a tensor attribute, a cache dict (and one nested in it), a lazily registered buffer, a
    counter and a list a forward appends to."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
        self.head = nn.Linear(8, 1)
        self.src_mask = None
        self.cache: dict = {"by_length": {}}
        self.calls = 0
        self.lengths: list[int] = []

    def forward(self, x):
        self.calls += 1
        self.lengths.append(x.shape[0])
        if self.src_mask is None or self.src_mask.shape[0] != x.shape[-1]:
            self.src_mask = torch.ones(x.shape[-1], device=x.device)
        self.cache.setdefault("scale", torch.full((1,), 0.5, device=x.device))
        self.cache["by_length"].setdefault(x.shape[0], torch.arange(float(x.shape[-1]), device=x.device))
        if not hasattr(self, "table"):
            self.register_buffer("table", torch.zeros(x.shape[-1], device=x.device), persistent=False)
        hidden = self.net(x * self.src_mask * self.cache["scale"] + self.table + self.cache["by_length"][x.shape[0]])
        return self.head(hidden)


def _identities(model: nn.Module) -> dict:
    """Every submodule's attributes, parameters and buffers as (type, identity), and its containers' items."""
    out = {}
    for prefix, module in model.named_modules():
        for name, value in vars(module).items():
            out[f"{prefix}.{name}"] = (type(value), id(value))
            if isinstance(value, dict):
                out[f"{prefix}.{name}[]"] = sorted((str(k), type(v), id(v)) for k, v in value.items())
                for key, inner in value.items():
                    if isinstance(inner, dict):
                        out[f"{prefix}.{name}[{key}][]"] = sorted((str(k), id(v)) for k, v in inner.items())
            elif isinstance(value, list):
                out[f"{prefix}.{name}[]"] = [id(v) for v in value]
        for name, tensor in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
            out[f"{prefix}:{name}"] = (type(tensor), id(tensor), tensor.grad is None)
    return out


@pytest.mark.parametrize("first_real_forward", [False, True], ids=["traced-first", "real-first"])
def test_the_trace_leaves_every_submodule_as_it_was_even_one_that_builds_state_on_its_first_forward(
        first_real_forward) -> None:
    from torch._subclasses.fake_tensor import FakeTensor

    torch.manual_seed(0)
    model = BuildsOnFirstForward()
    optimizer = torch.optim.AdamW(model.parameters())
    batch = torch.randn(4, 8)
    loss_of = lambda m, b: m(b).pow(2).mean()  # noqa: E731
    if first_real_forward:  # a resume: the state exists, real, before the trace (then the trace must not swap it)
        loss_of(model, batch).backward()
        optimizer.zero_grad(set_to_none=True)
    before = _identities(model)
    memory = StepMemory(model, lambda: optimizer, "cpu")
    memory.predict(loss_of, batch)
    assert memory.why == "" and memory.predicted > 0
    assert _identities(model) == before
    leaked = [f"{p}.{n}" for p, m in model.named_modules() for n, v in vars(m).items() if isinstance(v, FakeTensor)]
    assert not leaked and not any(isinstance(v, FakeTensor) for v in model.cache.values())
    loss = loss_of(model, batch)  # the next real forward, and a value read from it
    loss.backward()
    optimizer.step()
    assert loss.item() > 0 and model.calls == 2 - (not first_real_forward) and model.lengths == [4] * model.calls
