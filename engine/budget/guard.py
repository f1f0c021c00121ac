"""Start-of-run guard: refuse a run predicted not to fit, with options that do; cap the batch under --vram-gb.

``check_start(config, device_info) -> GuardResult`` is what the engine calls
before building anything big. Rules:

- ``budget.check = false`` (``--no-vram-check``): start, and say what the
  prediction and budget were.
- No budget (CPU without ``budget.vram_gb``): start; there is no device
  budget to enforce, and the note says so with the predicted peak.
- Fits: start.
- Does not fit and ``budget.vram_gb`` was given: cap ``train.batch_size`` to
  the largest that fits (same ``grad_accum``) and say so — or refuse when not
  even batch 1 fits.
- Does not fit otherwise (the budget is the device's free memory): refuse.

A refusal's ``message`` is one line; ``options`` are the ways out, each with
its numbers: the largest batch that fits, gradient accumulation keeping the
effective batch, a combination of the task's settings that fits, a
smaller preset, the ``--vram-gb`` the run would need, ``--no-vram-check``.
Torch-free (the caller measures the device).

A multi-process job (``layout``) is checked per rank: every prediction is one
rank's peak (engine.budget.layout) against the budget of that rank's device,
and a refusal names the ranks, the bytes each needs and the budget. Every rank
predicts the same, so a job that does not fit on one rank fits on none.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.budget import plan as planner
from engine.budget.layout import SINGLE, Layout
from engine.budget.measure import DeviceInfo
from engine.budget.settings import with_settings
from engine.core.config import RunConfig, load
from engine.core.estimate import Estimate
from engine.core.fmt import GIB, human


@dataclass
class GuardResult:
    """The guard's decision: start or not, the (possibly capped) config, and what to tell the user."""

    ok: bool
    config: RunConfig
    message: str
    estimate: Estimate | None = None
    budget: planner.Budget | None = None
    options: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    capped_from: int | None = None

    def text(self) -> str:
        """The message, then one indented line per option (what a CLI prints)."""
        lines = [self.message]
        lines += [f"  - {option}" for option in self.options]
        return "\n".join(lines)

    def summary(self) -> dict:
        """JSON-ready summary for RunStarted.budget."""
        return {
            "ok": self.ok, "message": self.message, "options": list(self.options), "notes": list(self.notes),
            "predicted": self.estimate.total if self.estimate else None,
            "source": self.estimate.source if self.estimate else None,
            "breakdown": dict(self.estimate.breakdown) if self.estimate else {},
            "budget": self.budget.bytes if self.budget else None,
            "budget_total": self.budget.total if self.budget else None,
            "budget_source": self.budget.source if self.budget else None,
            "capped_from": self.capped_from,
        }


def _gib(n: int) -> str:
    return human(n)


def _who(layout: Layout) -> str:
    """'' for one process, else 'on each of ranks 0-1 (2 ranks, fsdp2) ' for the messages."""
    if layout.single:
        return ""
    ranks = "rank 0" if layout.world == 1 else f"ranks 0-{layout.world - 1}"
    return f"on each of {ranks} ({layout.describe()}) "


def check_start(config: RunConfig, device: DeviceInfo | None, layout: Layout = SINGLE,
                tracer=None) -> GuardResult:
    """Decide whether ``config`` may start on ``device`` (module docstring); ``layout``: per rank of that job.

    On a CUDA device the analytic prediction is checked against a traced step there and the larger is used
    (engine.budget.crosscheck; ``tracer`` replaces the trace in tests); the note says when they differ.
    """
    from engine.budget.crosscheck import checked_predictor

    target = device.type if device is not None else ("cpu" if config.runtime.device == "cpu" else "cuda")
    predict, check = checked_predictor(config, target, layout, planner.target_of(target, device), tracer)
    result = _decide(config, device, layout, predict, target)
    if check:
        result.notes.append(check)
    return result


def _decide(config: RunConfig, device: DeviceInfo | None, layout: Layout, predict, target: str) -> GuardResult:
    """The guard's rules (module docstring) with ``predict`` for a ``target`` device type."""
    who = _who(layout)
    estimate = predict()
    budget = planner.resolve_budget(config, device)
    peak = estimate.total
    if budget is None:
        return GuardResult(True, config, f"CPU: no device budget to enforce (pass --vram-gb to set one); "
                           f"predicted peak {who}{human(peak)}", estimate)
    if not config.budget.check:
        verdict = "fits" if peak <= budget.bytes else "does NOT fit"
        return GuardResult(True, config, f"memory check off (--no-vram-check): predicted peak {who}{_gib(peak)} "
                           f"{verdict} the budget {budget.describe()}", estimate, budget)
    if config.runtime.compile != "off" and target == "cuda":
        return GuardResult(False, config, compile_refusal(config, peak, budget), estimate, budget,
                           options=[f"--compile off: eager steps, predicted {_gib(peak)}",
                                    "--no-vram-check: compile without the memory guard"])
    if peak <= budget.bytes:
        return GuardResult(True, config, f"predicted peak {who}{_gib(peak)} fits the budget {budget.describe()}",
                           estimate, budget)
    B, accum = config.train.batch_size, config.train.grad_accum
    largest = planner.largest_batch(predict, budget.bytes, grad_accum=accum)
    if config.budget.vram_gb is not None and largest >= 1:
        capped = with_settings(config, batch_size=largest, grad_accum=min(accum, largest))
        new = predict(batch_size=largest, grad_accum=min(accum, largest))
        k = -(-B // largest)
        message = (f"--vram-gb {config.budget.vram_gb:g}: batch_size {B} → {largest}, the largest predicted to "
                   f"fit {budget.describe()} (predicted {_gib(new.total)}; batch {B} needs {_gib(peak)}); "
                   f"to keep the effective batch {B} instead use --batch-size {B} --grad-accum {k}")
        return GuardResult(True, capped, message, new, budget, capped_from=B)
    options = refusal_options(config, predict, budget, peak, largest, layout)
    message = (f"predicted peak {who}{_gib(peak)} for batch_size {B} does not fit the budget "
               f"{budget.describe()}; options:")
    return GuardResult(False, config, message, estimate, budget, options=options)


def compile_refusal(config: RunConfig, peak: int, budget: planner.Budget) -> str:
    """Why the guard does not start a ``runtime.compile`` run on a device budget.

    A compiled step is judged by the eager step's prediction, as an upper bound: AOTAutograd's min-cut
    partitioner keeps for backward the cheapest set of tensors that separates forward from backward (eager's
    saved tensors are one such set) and inductor frees buffers at their last use, as eager does. On CPU, whose
    budget is the machine's RAM, that is what the guard does. On a device the bound has not been measured yet
    (the GPU script's compiled memory row measures it) and inductor's own workspaces come on top, so the guard
    refuses rather than risk an out-of-memory crash it promised to prevent.
    """
    return (f"runtime.compile={config.runtime.compile} under the memory guard: the budget {budget.describe()} would be "
            f"judged by an eager step's predicted peak ({_gib(peak)}), an upper bound for a compiled step not yet "
            "measured on this kind of device (inductor's workspaces come on top); options:")


def refusal_options(config: RunConfig, predict, budget: planner.Budget, peak: int, largest: int,
                    layout: Layout = SINGLE) -> list[str]:
    """The ways out of a refusal, each with its numbers (module docstring)."""
    B, accum = config.train.batch_size, config.train.grad_accum
    out = []
    if layout.strategy == "ddp" and "fsdp2" in train_strategies():  # sharding the model may be all it takes
        sharded = Layout(layout.world, "fsdp2")
        fsdp = planner.predictor_for(config, "cpu" if config.runtime.device == "cpu" else "cuda", sharded)()
        if fsdp.total <= budget.bytes:
            out.append(f"--strategy fsdp2: parameters, gradients and optimizer state sharded over "
                       f"{layout.world} ranks (predicted {_gib(fsdp.total)} per rank)")
    if largest >= 1:
        fit = predict(batch_size=largest, grad_accum=accum).total
        out.append(f"--batch-size {largest}: the largest batch that fits (predicted {_gib(fit)})")
        k = -(-B // largest)
        while k < B and predict(batch_size=B, grad_accum=k).total > budget.bytes:
            k += 1
        acc = predict(batch_size=B, grad_accum=k).total
        if acc <= budget.bytes:
            out.append(f"--grad-accum {k}: micro-batch {-(-B // k)}, effective batch {B} kept "
                       f"(predicted {_gib(acc)})")
    if len(planner.settings_to_try(config)) > 1:  # the task has alternatives worth trying
        plan = planner.make_plan(config, budget, predict=predict)
        fitting = [o for o in plan.options if o.fits]
        if fitting:
            best = min(fitting, key=lambda o: o.rank)
            out.append(f"{best.flags()}: batch {B} fits (predicted {_gib(best.predicted)})")
    preset = _smaller_preset(config, budget, layout)
    if preset is not None:
        name, total = preset
        out.append(f"--preset {name}: a smaller model, batch {B} fits (predicted {_gib(total)})")
    need = -(-int(peak / config.budget.safety + budget.reserve) // (GIB // 100)) / 100
    out.append(f"--vram-gb {need:.2f}: the budget this run needs (if the device really has that much)")
    out.append("--no-vram-check: start anyway (an out-of-memory error halves the micro-batch when "
               "policies.oom_recovery is on)")
    return out


def train_strategies() -> tuple[str, ...]:
    """The ``--strategy`` values ``train`` accepts (engine.core.cli_args), so no option names one it lacks."""
    from engine.core.cli_args import STRATEGIES

    return STRATEGIES


def _smaller_preset(config: RunConfig, budget: planner.Budget, layout: Layout = SINGLE) -> tuple[str, int] | None:
    """The largest preset of this task, smaller than the configured one, in which the batch fits."""
    from engine.budget import analytic
    from engine.core.registry import get_spec

    names = list(get_spec(config.task.name).presets)
    if config.task.preset not in names or not analytic.has_model(config):
        return None
    device = "cpu" if config.runtime.device == "cpu" else "cuda"
    for name in reversed(names[: names.index(config.task.preset)]):
        try:
            other = load(preset=name, task=config.task.name,
                         overrides={"train": {"batch_size": config.train.batch_size,
                                              "grad_accum": config.train.grad_accum},
                                    "runtime": {"precision": config.runtime.precision}})
        except Exception:
            continue
        total = analytic.estimate(other, device=device, layout=layout).total
        if total <= budget.bytes:
            return name, total
    return None
