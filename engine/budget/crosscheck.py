"""The analytic bound checked against a traced step where the target device is here: the larger one is used.

The analytic model is an upper bound by derivation, but a derivation can miss
a path the device takes (the first GPU run found the LM's attention on CUDA
52 % over the plan). Where the run's device is on this machine — ``plan`` on
a GPU box, the start guard of a CUDA run — one step of the configured run is
traced on it (engine.budget.trace: fake tensors, the real kernels' choices)
and compared with the analytic prediction at the same settings. Every later
prediction is the analytic one raised by the ratio when the trace is larger
(never lowered: the bound stays a bound), and when the two differ by more
than ``DIFFER`` the note says so, with both numbers.

Nothing is traced for a task without an analytic model (its predictions are
traces already), for a CPU target (the analytic model was checked against
CPU steps), or where the device is not here (engine.budget.trace.trace_device).
A trace that fails leaves the analytic prediction and says why.
"""

from __future__ import annotations

from typing import Callable

from engine.budget import analytic
from engine.budget import plan as planner
from engine.budget.layout import SINGLE, Layout
from engine.core.config import RunConfig
from engine.core.estimate import Estimate
from engine.core.fmt import human
from engine.tasks.attention_kernels import Target

#: Relative difference between the analytic and the traced prediction worth a note.
DIFFER = 0.10

Tracer = Callable[[RunConfig], Estimate]


def checked_predictor(config: RunConfig, device: str, layout: Layout = SINGLE, target: Target | None = None,
                      tracer: Tracer | None = None) -> tuple[planner.Predictor, str]:
    """(predictor, note): ``planner.predictor_for``'s, raised to a traced step of ``config`` on ``device`` where
    that device is here (module docstring); ``tracer`` replaces the real trace (tests)."""
    predict = planner.predictor_for(config, device, layout, target)
    if device != "cuda" or not analytic.has_model(config):
        return predict, ""
    if tracer is None:
        from engine.budget.trace import trace, trace_device

        if trace_device(device) != device:
            return predict, ""

        def tracer(cfg: RunConfig) -> Estimate:
            return trace(cfg, device=device, layout=layout)
    bound = predict()
    try:
        traced = tracer(config)
    except Exception as exc:  # the trace is a check: the analytic bound still stands
        return predict, f"no traced check on {device}: {(str(exc).splitlines() or [''])[0][:160]}"
    ratio = traced.total / bound.total if bound.total else 1.0
    note = ""
    if abs(ratio - 1.0) > DIFFER:
        used = "the traced one, as a factor on every prediction" if ratio > 1 else "the analytic one"
        note = (f"analytic {human(bound.total)} vs traced on {device} {human(traced.total)} "
                f"({(ratio - 1) * 100:+.0f} %): differ by more than {DIFFER:.0%}; the larger is used ({used})")
    if ratio <= 1.0:
        return predict, note
    return Raised(predict, ratio, device), note


class Raised:
    """A predictor's estimates scaled up by ``ratio`` (a traced step was that much larger at the run's settings)."""

    def __init__(self, predict: planner.Predictor, ratio: float, device: str) -> None:
        self.predict = predict
        self.ratio = ratio
        self.device = device

    def __call__(self, **settings) -> Estimate:
        base = self.predict(**settings)
        total = int(base.total * self.ratio)
        breakdown = {**base.breakdown, f"raised to the traced step on {self.device}": total - base.total}
        return Estimate(total=total, breakdown=breakdown, upper_bound=base.upper_bound,
                        source=f"{base.source}, raised ×{self.ratio:.3f} to a traced step on {self.device}",
                        settings=base.settings)
