"""Planner: the budget, the largest batch that fits per setting of the task's knobs, and a recommendation.

Torch-free and instant for tasks with an analytic model (a plan is a few
hundred closed-form estimates, each well under a millisecond); other tasks
are planned from two traces (batch 1 and 4) on the near-linear peak(batch)
line (research/memory.md: the B=1/B=4 slope predicted B=512 within 0.4 %),
and a caller can confirm the chosen batch with one more trace.

Budget: ``budget.vram_gb`` GiB (or, without it, the device's free memory
plus what this process's allocator already holds), times ``budget.safety``.
The process's memory outside the allocator (CUDA context, library handles,
kernels: 640-780 MiB on an H200) is in no prediction, so it is reserved: out
of a device's *total* (``vram_gb``) all of it — the larger of what is
measured now and the figure for the device (engine.budget.measure.
context_bound: by capability and CUDA major, the largest measured row when
unknown); out of *free* memory what the context will still grow by after
the first steps (all of it when no context exists yet: ``plan`` reads NVML
without one). The budget's description names the figure and its source.

The alternatives come from the task's declared settings (engine.core.taskspec.Setting)
that affect memory and list ``choices``: every combination of them, in the
task's declared speed order — a setting declared earlier weighs more, and its
choices are listed fastest first (e.g. a recompute-free
setting before one that recomputes, larger chunks before smaller ones). A
setting whose ``requires`` is unmet (a chunk size when the backend does not
chunk) stays at its configured value and is not varied. The configured value
of every varied setting is tried too. A task without such settings gets one
option: its configuration as it is.

A multi-process job (``layout``: ``--nproc-per-node``, ``--strategy``) is
planned per rank (engine.budget.layout): every prediction is one rank's peak,
the batch searched is still the job's (each rank reads its share), and the
budget is one device's.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from engine.budget import analytic
from engine.budget.layout import SINGLE, Layout
from engine.budget.measure import DeviceInfo, context_bound
from engine.budget.settings import declared, value_of
from engine.core.config import RunConfig
from engine.core.estimate import Estimate
from engine.core.fmt import GIB, human
from engine.tasks.attention_kernels import Target

#: Largest batch the planner searches up to.
MAX_BATCH = 1 << 20


@dataclass(frozen=True)
class Budget:
    """Bytes a plan may use (after the safety factor and any context reserve), and where they came from."""

    bytes: int
    total: int
    safety: float
    source: str
    reserve: int = 0
    #: Where the context reserve's figure comes from (measured, or the table row used).
    reserve_source: str = ""

    def describe(self) -> str:
        """'72.00 GiB (80 GiB × 0.90 − 800 MiB context [why], --vram-gb)' style text."""
        why = f" [{self.reserve_source}]" if self.reserve_source else ""
        reserve = f" − {human(self.reserve)} context{why}" if self.reserve else ""
        return f"{human(self.bytes)} ({human(self.total)} × {self.safety:.2f}{reserve}, {self.source})"


def context_reserve(device: DeviceInfo | None, whole: bool) -> tuple[int, str]:
    """(bytes, why) to reserve for the process's memory outside the allocator (module docstring): all of it
    (``whole``: a budget that is the device's total), or what it will still grow by (free memory)."""
    bound, why = context_bound(device.capability if device else None, device.cuda_major if device else None)
    measured = device.context if device is not None else None
    if measured is None:
        return bound, f"assumed: {why}"
    if whole:
        return (measured, f"measured ({device.context_source})") if measured >= bound else \
            (bound, f"{human(measured)} measured before the first step; {why}")
    return max(0, bound - measured), f"growth after the first steps beyond the {human(measured)} measured: {why}"


def resolve_budget(config: RunConfig, device: DeviceInfo | None) -> Budget | None:
    """The budget for ``config`` on ``device``: --vram-gb, else free device memory or available RAM; else None."""
    b = config.budget
    if b.vram_gb is not None:
        total = int(b.vram_gb * GIB)
        cuda_target = device.type == "cuda" if device is not None else config.runtime.device != "cpu"
        reserve, why = context_reserve(device, whole=True) if cuda_target else (0, "")
        return Budget(bytes=max(0, int(total * b.safety) - reserve), total=total, safety=b.safety,
                      source="--vram-gb / budget.vram_gb", reserve=reserve, reserve_source=why)
    if device is not None and device.type == "cuda" and device.free is not None:
        # What this process can use: free memory plus what its allocator already holds (the run's own
        # weights, once built, are in the prediction and must not be counted against it twice).
        usable = device.free + device.reserved
        reserve, why = context_reserve(device, whole=False)
        return Budget(bytes=max(0, int(usable * b.safety) - reserve), total=usable, safety=b.safety,
                      source=f"free memory of {device.name}", reserve=reserve, reserve_source=why)
    if device is not None and device.type == "cpu" and device.free is not None:
        # CPU: available RAM (plus the run's own weights when already built), so the guard and live changes
        # are checked on a laptop too.
        usable = device.free + device.reserved
        return Budget(bytes=int(usable * b.safety), total=usable, safety=b.safety, source="available RAM")
    return None


Predictor = Callable[..., Estimate]


def predictor_for(config: RunConfig, device: str, layout: Layout = SINGLE, target: Target | None = None) -> Predictor:
    """predict(**settings) -> Estimate: the analytic model, or a traced line for tasks without one.

    With a ``layout``, each prediction is one rank's peak for the job's batch (module docstring);
    ``target``: the device facts attention kernels are chosen for (engine.budget.analytic).
    """
    if analytic.has_model(config):
        return lambda **kw: analytic.estimate(config, device=device, layout=layout, target=target, **kw)
    return TracedLine(config, device, layout)


def target_of(device: str, info: DeviceInfo | None) -> Target:
    """The attention-kernel target for planning on ``device`` with what ``info`` knows (its capability)."""
    return Target.local(device, info.capability if info is not None and info.type == device else None)


class TracedLine:
    """peak(batch) ≈ a + b·batch from traces at (rank) batch 1 and 4, per combination of settings.

    A line for a CUDA target on a machine that cannot trace CUDA (a laptop planning a GPU run) is traced on
    the CPU (engine.budget.trace.trace_device) and says so in its source and breakdown.
    """

    def __init__(self, config: RunConfig, device: str, layout: Layout = SINGLE) -> None:
        from engine.budget.trace import trace_device

        self.config = config
        self.device = trace_device(device)
        self.target = device
        self.layout = layout
        self.lines: dict[tuple, tuple[Estimate, Estimate]] = {}

    def __call__(self, batch_size: int | None = None, **settings) -> Estimate:
        from engine.budget import trace

        key = tuple(sorted((k, v) for k, v in settings.items() if v is not None))
        if key not in self.lines:
            one = trace.trace(self.config, batch_size=1, device=self.device, layout=self.layout, target=self.target,
                              **settings)
            four = trace.trace(self.config, batch_size=4, device=self.device, layout=self.layout, target=self.target,
                               **settings)
            self.lines[key] = (one, four)
        one, four = self.lines[key]
        B = batch_size or self.config.train.batch_size
        slope = (four.total - one.total) / 3
        total = int(one.total + slope * (self.layout.rank_batch(B) - 1))
        if self.device == self.target:
            name, source = "traced line (batch 1 and 4)", "trace"
        else:
            name = f"traced line (batch 1 and 4) on {self.device}, for {self.target}"
            source = (f"trace on {self.device} (no {self.target} to trace here: its allocator rounding, library "
                      f"workspaces and kernel choice are not in it)")
        return Estimate(total=total, breakdown={name: total}, upper_bound=False, source=source,
                        settings={**one.settings, "batch_size": B, "traced_on": self.device})


def largest_batch(predict: Predictor, budget: int, grad_accum: int = 1, hi: int = MAX_BATCH, **settings) -> int:
    """Largest batch_size whose predicted peak fits ``budget`` (0 if not even 1 fits).

    The peak is a convex, near-linear function of the batch (a max of affine
    phases plus a tiny B² contrastive term), so a secant guess from batch 1
    and 64 lands close; doubling steps bracket the answer and bisection ends it.
    """
    def fits(b: int) -> bool:
        return predict(batch_size=b, grad_accum=grad_accum, **settings).total <= budget

    if not fits(1):
        return 0
    f1 = predict(batch_size=1, grad_accum=grad_accum, **settings).total
    f64 = predict(batch_size=64, grad_accum=grad_accum, **settings).total
    slope = max(1.0, (f64 - f1) / 63)
    guess = int(min(hi, max(1, 1 + (budget - f1) // slope)))
    lo, up = (guess, None) if fits(guess) else (None, guess)
    step = max(1, guess // 64)
    while lo is None:  # walk down to a size that fits
        cand = max(1, up - step)
        if fits(cand):
            lo = cand
        else:
            up, step = cand, step * 2
    while up is None:  # walk up to one that does not
        cand = min(hi, lo + step)
        if cand == lo or not fits(cand):
            up = cand if cand != lo else lo + 1
        else:
            lo, step = cand, step * 2
    while up - lo > 1:
        mid = (lo + up) // 2
        lo, up = (mid, up) if fits(mid) else (lo, mid)
    return lo


@dataclass(frozen=True)
class Option:
    """One combination of the task's settings: the largest batch that fits and the peak at the requested batch.

    ``settings`` holds only the settings that vary for it (name → value), in declaration order.
    """

    settings: dict[str, Any]
    largest_batch: int
    predicted: int
    fits: bool
    rank: int
    #: setting name → dotted config path, for ``flags``.
    paths: dict[str, str] = field(default_factory=dict)

    def get(self, name: str, default: Any = None) -> Any:
        """The value of one setting in this option."""
        return self.settings.get(name, default)

    def label(self) -> str:
        """'name value, name value' text ('as configured' when nothing varies); a flag reads on / off."""
        return ", ".join(f"{k} {_word(v)}" for k, v in self.settings.items()) or "as configured"

    def flags(self) -> str:
        """The CLI flags that select this combination (a setting flag where `train` has one, else --set)."""
        from engine.core.cli_args import flag_of_setting, setting_flags

        offered = setting_flags()
        return " ".join(flag_of_setting(k, v) if k in offered else
                        f"--set {self.paths.get(k, k)}={str(v).lower() if isinstance(v, bool) else v}"
                        for k, v in self.settings.items())


def _word(value: Any) -> str:
    """A setting's value as the table shows it: on / off for a flag, else as it is."""
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


@dataclass
class Plan:
    """The planner's answer (module docstring)."""

    estimate: Estimate
    budget: Budget | None
    options: list[Option] = field(default_factory=list)
    recommended: Option | None = None
    recommended_batch: int | None = None
    recommended_grad_accum: int | None = None
    note: str = ""
    #: Ranks of the job and how they share the model (world size, strategy); 1 process by default.
    layout: Layout = SINGLE
    #: What checked the estimate (engine.budget.crosscheck: a traced step on the device, when it differs).
    check: str = ""

    def to_dict(self) -> dict:
        """JSON-ready form (``sensorlm-tui plan --json``)."""
        out = asdict(self)
        out["estimate"] = self.estimate.to_dict()
        # every rank predicts the same (engine.budget.layout); one row each, for readers that index by rank
        out["ranks"] = [{"rank": r, "predicted": self.estimate.total} for r in range(self.layout.world)]
        return out


def settings_to_try(config: RunConfig) -> list[dict[str, Any]]:
    """Combinations of the task's declared memory-affecting settings, in assumed speed order (module docstring)."""
    knobs = [st for st in declared(config) if st.affects_memory and st.choices]
    if not knobs:
        return [{}]
    values = []
    for st in knobs:
        current = value_of(config, st.name)
        values.append(list(st.choices) + ([current] if current not in st.choices else []))
    combos, seen = [], set()
    for combo in itertools.product(*values):
        chosen = dict(zip((st.name for st in knobs), combo))
        # A setting whose requirement is unmet does not vary: drop it from this combination.
        kept = {k: v for k, v in chosen.items()
                if all(chosen.get(n, value_of(config, n)) == want for n, want in _requires(knobs, k))}
        key = tuple(kept.items())
        if key not in seen:
            seen.add(key)
            combos.append(kept)
    return combos


def _requires(knobs: list, name: str) -> tuple:
    return next(st.requires for st in knobs if st.name == name)


def make_plan(config: RunConfig, budget: Budget | None, device: str = "cuda",
              predict: Predictor | None = None, layout: Layout = SINGLE) -> Plan:
    """Estimate the configured run; with a budget, the largest batch per setting and a recommendation.

    With a ``layout``, every number is one rank's (module docstring).
    """
    predict = predict or predictor_for(config, device, layout)
    estimate = predict()
    plan = Plan(estimate=estimate, budget=budget, layout=layout)
    if budget is None:
        plan.note = "no budget to plan against (CPU without --vram-gb): estimates only"
        return plan
    B, accum = config.train.batch_size, config.train.grad_accum
    paths = {st.name: st.path for st in declared(config)}
    for rank, kw in enumerate(settings_to_try(config)):
        at_b = predict(batch_size=B, grad_accum=accum, **kw).total
        biggest = largest_batch(predict, budget.bytes, grad_accum=accum, **kw)
        plan.options.append(Option(kw, biggest, at_b, at_b <= budget.bytes, rank, paths))
    fitting = [o for o in plan.options if o.fits]
    if fitting:
        plan.recommended = min(fitting, key=lambda o: o.rank)
        plan.recommended_batch, plan.recommended_grad_accum = B, accum
        return plan
    best = max(plan.options, key=lambda o: (o.largest_batch, -o.rank))
    plan.recommended = best
    if best.largest_batch == 0:
        plan.note = "nothing fits, not even batch 1: a smaller preset or a larger budget is needed"
        return plan
    # Keep the effective batch with gradient accumulation: micro-batch ≤ the largest that fits.
    kw = best.settings
    k = max(accum, -(-B // max(1, best.largest_batch)))
    while k < B and predict(batch_size=B, grad_accum=k, **kw).total > budget.bytes:
        k += 1
    plan.recommended_batch, plan.recommended_grad_accum = B, k
    return plan
