"""`sensorlm-tui plan`: the memory breakdown, the largest batch per setting of the task's knobs, a recommendation.

Torch-free unless ``--trace`` is given (then one traced step confirms the
recommendation in a subprocess, seconds). The budget is ``--vram-gb`` ×
``--safety``; without ``--vram-gb`` it is the free memory NVML reports for
GPU 0 (no torch, no CUDA context), and with neither there is nothing to plan
against: the estimate is printed and the output says so. Bad flags and
config values are one line on stderr and exit status 2.

``--nproc-per-node N`` / ``--strategy ddp|fsdp2`` plan one rank of an
N-process job (engine.budget.layout): the batch stays the job's, every number
is a rank's, and ``--trace`` traces one rank (FSDP2 on a fake process group).
"""

from __future__ import annotations

import argparse
import json
import sys

from engine.budget import plan as planner
from engine.budget.analytic import NoAnalyticModel
from engine.budget.layout import SINGLE, STRATEGIES, Layout
from engine.budget.measure import DeviceInfo, nvml_device_info
from engine.core.exit_codes import ExitCode
from engine.core.fmt import GIB, human


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The plan flags (the lead's tui/cli.py adds them to its `plan` sub-command)."""
    parser.add_argument("--config", metavar="TOML", help="TOML file with any config fields")
    parser.add_argument("--preset", help="named preset: demo, tiny, small, base (default demo)")
    parser.add_argument("--task", help="task (default: the built-in default; `sensorlm-tui presets` lists them)")
    parser.add_argument("--batch-size", type=int, help="batch size to plan for (default: the config's)")
    parser.add_argument("--grad-accum", type=int, help="micro-batches per step")
    parser.add_argument("--precision", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default=None,
                        help="plan for this device (default: cuda when --vram-gb is given or a GPU is present)")
    parser.add_argument("--vram-gb", type=float, help="budget in GiB (default: free memory of GPU 0, via NVML)")
    parser.add_argument("--safety", type=float, help="fraction of the budget a plan may use (default 0.9)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="set any config field, e.g. --set runtime.precision=bf16")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--trace", action="store_true", help="confirm the recommendation with one traced step")
    parser.add_argument("--nproc-per-node", type=int, metavar="N",
                        help="plan one rank of an N-process job (the batch stays the job's; default 1 process)")
    parser.add_argument("--strategy", choices=list(STRATEGIES),
                        help="how the ranks hold the model: ddp (whole, default with --nproc-per-node) or fsdp2 "
                             "(parameters, gradients and optimizer state sharded)")
    from engine.core.cli_args import add_setting_flags

    add_setting_flags(parser)


def _load(args: argparse.Namespace):
    from engine.core import config as cfg
    from engine.core.cli_args import explain_flag_error, overrides_from

    for flag, value in (("--batch-size", args.batch_size), ("--grad-accum", args.grad_accum)):
        if value is not None and value < 1:
            raise cfg.ConfigError(f"{flag}={value}: must be >= 1")
    if args.vram_gb is not None and not args.vram_gb > 0:
        raise cfg.ConfigError(f"--vram-gb={args.vram_gb:g}: must be > 0 (GiB)")
    if args.safety is not None and not 0 < args.safety <= 1:
        raise cfg.ConfigError(f"--safety={args.safety:g}: must be in (0, 1]")
    overrides = overrides_from(argparse.Namespace(**{k: v for k, v in vars(args).items()
                                                     if k not in ("device", "json", "trace", "safety",
                                                                  "nproc_per_node", "strategy")}))
    if args.safety is not None:
        overrides.setdefault("budget", {})["safety"] = args.safety
    try:
        return cfg.load(args.config, preset=args.preset, overrides=overrides, task=args.task)
    except cfg.ConfigError as exc:
        raise explain_flag_error(exc) from None


def layout_of(args: argparse.Namespace, config=None) -> Layout:
    """The job ``--nproc-per-node`` and ``--strategy`` describe (the config's ``runtime.strategy`` when only
    the rank count is given); one plain process without either."""
    world, strategy = getattr(args, "nproc_per_node", None), getattr(args, "strategy", None)
    if world is None and strategy is None:
        return SINGLE
    if world is not None and world < 1:
        raise ValueError(f"--nproc-per-node={world}: must be >= 1")
    default = getattr(getattr(config, "runtime", None), "strategy", None) or "ddp"
    return Layout(world or 1, strategy or default)


def _device(args: argparse.Namespace, config) -> tuple[str, DeviceInfo | None]:
    """(target device type, DeviceInfo or None) — NVML only, never torch."""
    wanted = args.device or "auto"
    if wanted == "cpu":
        return "cpu", DeviceInfo()
    info = nvml_device_info() if config.budget.vram_gb is None else None
    if wanted == "cuda" or info is not None or config.budget.vram_gb is not None:
        return "cuda", info
    return "cpu", DeviceInfo()


def main(args: argparse.Namespace) -> int:
    """Run the planner for parsed ``args``; print the table (or JSON). Exit 0, or 2 on bad input."""
    from engine.core.config import ConfigError

    try:
        if getattr(args, "nproc_per_node", None) is not None and args.nproc_per_node < 1:
            raise ValueError(f"--nproc-per-node={args.nproc_per_node}: must be >= 1")  # before the config
        config = _load(args)
        layout = layout_of(args, config)
        target, info = _device(args, config)
        budget = planner.resolve_budget(config, info if info is not None else None)
        from engine.budget.crosscheck import checked_predictor

        predict, check = checked_predictor(config, target, layout, planner.target_of(target, info))
        plan = planner.make_plan(config, budget, device=target, predict=predict, layout=layout)
        plan.check = check
    except (ConfigError, NoAnalyticModel, ValueError) as exc:
        sys.stderr.write(f"sensorlm-tui: error: {str(exc).splitlines()[0]}\n")
        return ExitCode.BAD_INPUT
    except Exception as exc:  # a trace that cannot run here (TraceError, a task refusing): one line, not a traceback
        sys.stderr.write(f"sensorlm-tui: error: cannot plan this run here: {(str(exc).splitlines() or [''])[0]}\n")
        return ExitCode.BAD_INPUT
    traced = None
    if args.trace:
        from engine.budget.settings import with_settings
        from engine.budget.trace import TraceError, trace, trace_device
        from engine.tasks.protocol import TaskError

        chosen = config
        if plan.recommended is not None:
            chosen = with_settings(config, grad_accum=plan.recommended_grad_accum, **plan.recommended.settings)
        traced_on = trace_device(target)
        try:  # one rank: its share of the batch
            traced = trace(chosen, batch_size=layout.rank_batch(chosen.train.batch_size), device=traced_on,
                           layout=layout)
        except TraceError as exc:
            sys.stderr.write(f"sensorlm-tui: error: {exc}\n")
            return 1
        except TaskError as exc:  # the task's own code raised while traced (a plugin's make_batch): bad input
            sys.stderr.write(f"sensorlm-tui: error: {str(exc).splitlines()[0]}\n")
            return ExitCode.BAD_INPUT
        from engine.budget.analytic import estimate, has_model

        # the analytic bound on the device the trace faked (None for a task without an analytic model)
        same = estimate(chosen, device=traced_on, layout=layout) if has_model(chosen) else None
        traced = (traced, same)
    if args.json:
        out = plan.to_dict()
        out["device"] = target
        out["traced"] = traced[0].to_dict() if traced else None
        out["traced_vs_analytic_same_device"] = traced[1].total if traced and traced[1] else None
        print(json.dumps(out, indent=2, default=str))
        return 0
    print(render(config, plan, target, traced))
    return 0


def render(config, plan: planner.Plan, target: str, traced: tuple | None = None) -> str:
    """The human table: breakdown, largest batch per setting, recommendation."""
    e = plan.estimate
    from engine.budget.settings import task_values

    t = config.train
    knobs = "".join(f", {k} {v}" for k, v in task_values(config).items())
    layout = plan.layout
    per_rank = "" if layout.single else (f", {layout.describe()}: {layout.rank_batch(t.batch_size)} samples "
                                         f"a rank a step")
    lines = [f"{config.task.name} / {config.task.preset}: batch {t.batch_size} (grad_accum {t.grad_accum}), "
             f"{config.runtime.precision}{knobs}, device {target}{per_rank}",
             f"predicted peak {'' if layout.single else 'per rank (every rank alike) '}{human(e.total)} "
             f"({e.source}{', upper bound' if e.upper_bound and not layout.sharded else ''}"
             + (f"; at {e.settings.get('phase')}" if e.settings.get("phase") else "") + ")", ""]
    width = max((len(k) for k in e.breakdown), default=10)
    lines.append(f"  {'at the peak':{width}s}  {'bytes':>10s}  share")
    for key, value in sorted(e.breakdown.items(), key=lambda kv: -kv[1]):
        if value:
            lines.append(f"  {key:{width}s}  {human(value):>10s}  {100 * value / e.total:5.1f} %")
    lines.append("")
    if plan.check:
        lines += [f"checked: {plan.check}", ""]
    if plan.budget is None:
        lines.append(plan.note + " — pass --vram-gb to plan for a GPU")
        return "\n".join(lines)
    lines.append(f"budget {plan.budget.describe()}")
    names = [o.label() for o in plan.options]
    width = max([len("setting"), *map(len, names)])  # the columns line up whatever the task's settings are
    peak = f"peak at batch {t.batch_size}"
    lines.append(f"  {'setting':{width}s}  {'largest batch':>13s}  {peak:>{max(len(peak), 10)}s}")
    for name, o in zip(names, plan.options):
        mark = "fits" if o.fits else "over"
        lines.append(f"  {name:{width}s}  {o.largest_batch:13d}  {human(o.predicted):>{max(len(peak), 10)}s} {mark}")
    lines.append("")
    rec = plan.recommended
    if rec is None or rec.largest_batch == 0:
        lines.append("recommendation: " + (plan.note or "nothing fits"))
    else:
        extra = ""
        if plan.recommended_grad_accum != t.grad_accum:
            extra = (f" --grad-accum {plan.recommended_grad_accum} (micro-batch "
                     f"{-(-t.batch_size // plan.recommended_grad_accum)}, effective batch {t.batch_size} kept)")
        lines.append(f"recommendation: {rec.flags() or 'as configured'}{extra} — the fastest setting that fits "
                     f"(in the task's declared speed order)")
    if traced is not None:
        tr, same = traced
        dev = tr.settings.get("device", "cpu")
        versus = (f"; analytic for {dev}: {human(same.total)} "
                  f"({(same.total - tr.total) / max(1, tr.total) * 100:+.1f} %)" if same is not None else "")
        where = "" if layout.single else f", one rank of {layout.describe()}"
        lines.append(f"traced on fake {dev} tensors (recommended settings{where}): {human(tr.total)} "
                     f"{f'in {tr.seconds:.1f} s' if tr.seconds else '(cached)'}{versus}")
    lines.append(f"(1 GiB = {GIB} bytes)")
    return "\n".join(lines)
