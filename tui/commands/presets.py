"""`sensorlm-tui presets [--task NAME]`: each preset of a task with its parameter count, in well under 1 s.

Why analytic counts: the count used to come from building each preset's model
on the meta device, which meant importing torch and transformers-sized model
code (11–14 s on the shared 2-core box for a four-row table). The task's
analytic memory model (engine.budget.analytic) already lists every parameter
tensor by shape to predict memory, and a test holds that list equal to the
real model's parameters (tests/engine/budget/test_analytic.py), so its
"weights" term (4 bytes a parameter) *is* the count: exact, torch-free,
~1 ms a preset. A task without one may declare ``TaskSpec.param_count`` (gapfill
builds its U-Net on the meta device: torch is imported for that task only);
a plugin that declares neither shows "–" with a line saying why.

The first line lists every task this install knows (built-ins and plugins),
which is what the command's help promises.
"""

from __future__ import annotations

import argparse
import sys

from engine.core.exit_codes import ExitCode

#: Bytes per parameter in the analytic model's "weights" term (fp32 master weights).
_WEIGHT_BYTES = 4
#: Model fields shown in the shape column, when the task's config has them.
_SHAPE_FIELDS = ("dim", "depth", "heads", "patch_time", "patch_channels")


def param_count(task: str, preset: str) -> int | None:
    """Parameters of one preset: from the analytic memory model, else the task's declared counter; None
    when it has neither."""
    import importlib

    from engine.budget import analytic
    from engine.core import config as cfg
    from engine.core.registry import get_spec

    config = cfg.load(preset=preset, task=task)
    if not analytic.has_model(config):
        counter = get_spec(task).param_count
        if not counter:
            return None
        module, _, name = counter.partition(":")
        return int(getattr(importlib.import_module(module), name)(config))
    weights = analytic.estimate(config, device="cpu", precision="fp32").breakdown.get("weights")
    return None if weights is None else int(weights) // _WEIGHT_BYTES


def tasks_line(chosen: str) -> str:
    """"tasks: a (default), b, c · presets of a:" — every task this install knows."""
    from engine.core import registry as tasks

    names = [f"{n} (default)" if n == tasks.DEFAULT_TASK else n for n in tasks.task_names()]
    return f"tasks: {', '.join(names)} · presets of {chosen} (--task NAME for another):"


def main(args: argparse.Namespace) -> int:
    """Print the tasks, then the presets of ``args.task``; exit 2 with one line for an unknown or broken task."""
    from engine.core import registry as tasks

    chosen = args.task or tasks.DEFAULT_TASK
    try:  # a broken plugin fails only when it is the one asked for; the built-ins list regardless
        spec = tasks.get_spec(chosen)
    except (tasks.UnknownTask, tasks.TaskLoadError) as exc:
        sys.stderr.write(f"sensorlm-tui: error: --task {chosen!r}: {exc}\n")
        return ExitCode.BAD_INPUT
    rows, unknown = [], False
    for name, preset in spec.presets.items():
        section = preset.get(chosen, {})
        model = section.get("model", section) if isinstance(section, dict) else {}
        shape = ", ".join(f"{k}={v}" for k, v in model.items() if k in _SHAPE_FIELDS + ("base",))
        try:  # a plugin's preset its own section refuses: its author's bug, named in one line
            count = param_count(chosen, name)
        except ValueError as exc:  # ConfigError, or a TaskError from the task's memory model
            sys.stderr.write(f"sensorlm-tui: error: --task {chosen!r}: "  # the error names the preset
                             f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}\n")
            return ExitCode.BAD_INPUT
        unknown |= count is None
        rows.append(f"{name:<8} {'–' if count is None else format(count, ','):>14}  {shape}")
    print(tasks_line(chosen), f"{'preset':<8} {'parameters':>14}  shape", *rows, sep="\n")
    if unknown:
        print(f"(–: {chosen} declares neither an analytic memory model nor TaskSpec.param_count)")
    return 0
