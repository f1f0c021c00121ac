"""A user's plain loop, as the tests run it in a forked child of the preloaded fork server (``entry="loop"``).

    RUN_DIR [--steps N] [--save-every K] [--width W] [--metric NAME=EXPR]... [--eval NAME=EXPR]... [--kill-at N]

An MLP of width ``W`` (a wider one makes each save of ``checkpoints/last.pt`` take longer, for a kill to land
mid-save) trained with the cockpit's default save. ``--metric`` logs ``NAME`` every step and ``--eval`` at each
of the two evaluations, each the value of a Python expression (``torch`` in scope): what a user's script may
hand over. The script behaves as a careful command does: a ``CockpitError`` is one line
``sensorlm-tui: error: …`` on stderr and exit 2 (the hostile corpus's contract for every surface), and the
cockpit's one-line warnings (logger ``sensorlm_tui``) go to stdout.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time

import torch
from torch import nn

from sensorlm_tui.loop import CockpitError, cockpit


def _values(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        name, _, expression = pair.partition("=")
        out[name] = eval(expression, {"torch": torch})  # noqa: S307 - the test's own expressions
    return out


def build(width: int = 16) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The loop's model and optimizer (the same draws every time)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, width), nn.Tanh(), nn.Linear(width, 1))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="user_loop")
    parser.add_argument("run_dir")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--save-every", type=int, default=2)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--metric", action="append", default=[])
    parser.add_argument("--eval", action="append", default=[])
    parser.add_argument("--kill-at", type=int, default=0, help="SIGKILL itself after this step (once its records "
                        "are on disk: the heartbeat and the log's drainer write every second)")
    args = parser.parse_args(argv)
    logging.getLogger("sensorlm_tui").addHandler(logging.StreamHandler(sys.stdout))
    model, optimizer = build(args.width)
    try:
        with cockpit(args.run_dir, model=model, optimizer=optimizer, total_steps=args.steps,
                     save_every=args.save_every, log_every=1) as run:
            for step in range(run.start_step, args.steps):
                x = torch.randn(32, 16, generator=torch.Generator().manual_seed(step))
                loss = nn.functional.mse_loss(model(x), x.sum(1, keepdim=True).sin())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                run.step(loss=loss, **_values(args.metric))
                if args.eval and (step + 1) % max(1, args.steps // 2) == 0:
                    run.eval(**_values(args.eval))
                if step + 1 == args.kill_at:
                    time.sleep(2.5)
                    os.kill(os.getpid(), signal.SIGKILL)
    except CockpitError as exc:
        print(f"sensorlm-tui: error: {exc}", file=sys.stderr)
        return 2
    print(f"done at step {run.step_count}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
