"""A torchrun job's ranks checked against this machine before any process starts: cores and memory.

Each rank is a whole training process: Python, torch, gloo's threads and its
share of the step. ``--nproc-per-node 999`` on 2 cores started processes
until the machine ran out of them (``BlockingIOError``, exit 247 after 29 s);
these checks refuse it in one line instead, naming what the machine has:

- **cores**: at most ``RANKS_PER_CORE`` ranks a usable core. Every step ends
  in collectives every rank must reach, so ranks sharing a core wait for each
  other's time slices at each one; past a few a core the job only queues;
- **memory**: every rank holds ``RANK_PROCESS_BYTES`` before it trains (its
  interpreter, torch and the engine: measured private memory of a rank after
  its imports, torch 2.13 on CPU) and, training on CPU, its predicted peak
  (the per-rank plan: engine.budget.layout) on top; all of it must fit the
  memory available now.

Torch-free (the analytic memory model is), so the refusal comes in well under a second.
"""

from __future__ import annotations

import argparse
import os

#: Most ranks a usable core may carry (module docstring).
RANKS_PER_CORE = 4
#: Private memory of one rank process after importing torch, torch.distributed and the engine, before its
#: model exists (/proc/self/smaps_rollup Private_Dirty: 220 MiB on torch 2.13 CPU, Python 3.11).
RANK_PROCESS_BYTES = 220 << 20


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def refusal(args: argparse.Namespace) -> str | None:
    """The one-line reason this machine cannot hold ``args.nproc_per_node`` ranks, or None when it can."""
    ranks = args.nproc_per_node
    cores = len(os.sched_getaffinity(0))
    if ranks > cores * RANKS_PER_CORE:
        return (f"--nproc-per-node={ranks}: more than {RANKS_PER_CORE} ranks a core ({cores} usable "
                f"core{'s' if cores != 1 else ''} here: at most {cores * RANKS_PER_CORE}); each rank is a whole "
                "training process")
    try:
        import psutil

        available = int(psutil.virtual_memory().available)
    except Exception:  # no reading of the machine's memory: the ranks' own guard still checks each one
        return None
    peak = _rank_peak(args)
    need = ranks * (RANK_PROCESS_BYTES + peak)
    if need > available:
        fits = available // (RANK_PROCESS_BYTES + peak)
        return (f"--nproc-per-node={ranks}: {ranks} ranks need {_gib(need)} of memory ({RANK_PROCESS_BYTES >> 20} MiB "
                f"a process{f' + {_gib(peak)} predicted peak' if peak else ''} each) but {_gib(available)} is "
                f"available; at most {fits} fit")
    return None


def _rank_peak(args: argparse.Namespace) -> int:
    """One rank's predicted peak in host memory: the analytic per-rank plan on CPU, 0 where it does not apply
    (a GPU holds the step, a task without an analytic model, a config the ranks themselves will refuse)."""
    from pathlib import Path

    from engine.budget import analytic
    from engine.budget.layout import Layout
    from engine.core import config as cfg
    from engine.core.cli_args import overrides_from

    try:
        if args.resume:
            config = cfg.load_resolved(Path(args.resume) / "config.toml")
        else:
            config = cfg.load(args.config, preset=args.preset, overrides=overrides_from(args), task=args.task)
        if config.runtime.device == "cuda" or (config.runtime.device == "auto" and _has_gpu()) \
                or not analytic.has_model(config):
            return 0
        layout = Layout(args.nproc_per_node, config.runtime.strategy)
        return int(analytic.estimate(config, device="cpu", layout=layout).total)
    except (ValueError, OSError):  # ConfigError, TaskError: each rank says it in its own line
        return 0


def _has_gpu() -> bool:
    from engine.budget.measure import nvml_device_info

    return nvml_device_info(0) is not None
