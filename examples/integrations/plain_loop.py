"""A plain PyTorch loop in the cockpit: one ``with`` block and one ``run.step`` call per step.

    python examples/integrations/plain_loop.py RUN_DIR [--steps N] [--step-s S] [--save-every K]

Run it again on the same RUN_DIR after a crash (or a kill -9) and it continues from its last save.
``--step-s`` sleeps in each step so there is time to press keys in ``sensorlm-tui attach RUN_DIR``.
The tests drive this script.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

from sensorlm_tui.loop import cockpit


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(step)  # the same data for a step whatever run computes it
    x = torch.randn(64, 16, generator=generator)
    return x, x.sum(dim=1, keepdim=True).sin()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--step-s", type=float, default=0.0)
    parser.add_argument("--save-every", type=int, default=50)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

    def loss_fn(net, data):
        return nn.functional.mse_loss(net(data[0]), data[1])

    with cockpit(args.run_dir, model=model, optimizer=optimizer, total_steps=args.steps, save_every=args.save_every,
                 loss_fn=loss_fn, example_batch=batch(0)) as run:
        for step in range(run.start_step, args.steps):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model, batch(step))
            loss.backward()
            optimizer.step()
            if args.step_s:
                time.sleep(args.step_s)
            run.step(loss=loss)
            if (step + 1) % 50 == 0:
                with torch.no_grad():
                    run.eval(val_loss=loss_fn(model, batch(10**6)))
    print(f"done at step {run.step_count}")


if __name__ == "__main__":
    main()
