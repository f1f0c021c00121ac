"""A Lightning run in the cockpit: a tiny LightningModule on CPU, one extra callback.

    python examples/integrations/lightning_run.py RUN_DIR [--steps N] [--step-s S] [--devices D]
        [--model mlp|transformer] [--resume CKPT]

then, from any terminal: ``sensorlm-tui attach RUN_DIR`` (space pauses, c checkpoints, a aborts),
``sensorlm-tui runs``, ``sensorlm-tui plot RUN_DIR``. ``--step-s`` slows each step down (a sleep in
``training_step``) so there is time to press keys on a run this small; ``--devices 2`` trains on two
CPU processes under DDP (gloo). ``--model transformer`` is Lightning's own basic transformer example
(``lightning.pytorch.demos.Transformer``: it builds its mask and positional table on the first forward)
on random tokens; ``--resume`` continues from a checkpoint, as ``trainer.fit(ckpt_path=...)`` does. The
tests drive this script.
"""

from __future__ import annotations

import argparse
import logging
import time

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from sensorlm_tui.lightning import CockpitCallback


class Regressor(pl.LightningModule):
    """y = a·x + noise, fitted by a two-layer MLP."""

    def __init__(self, step_s: float = 0.0, width: int = 32) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, width), nn.GELU(), nn.Linear(width, 1))
        self.step_s = step_s

    def training_step(self, batch, index):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("train_mse", loss)
        if self.step_s:
            time.sleep(self.step_s)
        return loss

    def validation_step(self, batch, index):
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


class TokenModel(pl.LightningModule):
    """Lightning's basic transformer example (its ``Transformer``, small), next-token loss on random tokens."""

    def __init__(self, step_s: float = 0.0, vocab: int = 32) -> None:
        super().__init__()
        from lightning.pytorch.demos import Transformer

        self.model = Transformer(vocab_size=vocab, ninp=32, nhead=2, nhid=32, nlayers=1, dropout=0.0)
        self.step_s = step_s

    def training_step(self, batch, index):
        inputs, target = batch
        loss = nn.functional.nll_loss(self.model(inputs, target), target.view(-1))
        self.log("train_nll", loss)
        if self.step_s:
            time.sleep(self.step_s)
        return loss

    def validation_step(self, batch, index):
        inputs, target = batch
        self.log("val_loss", nn.functional.nll_loss(self.model(inputs, target), target.view(-1)))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def tokens(n: int, seed: int, vocab: int = 32, length: int = 12) -> TensorDataset:
    rows = torch.randint(0, vocab, (n, length + 1), generator=torch.Generator().manual_seed(seed))
    return TensorDataset(rows[:, :-1], rows[:, 1:])


def data(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=generator)
    y = x @ torch.linspace(-1, 1, 8).unsqueeze(1) + 0.05 * torch.randn(n, 1, generator=generator)
    return TensorDataset(x, y)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--step-s", type=float, default=0.0)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--val-every", type=int, default=50)
    parser.add_argument("--model", choices=("mlp", "transformer"), default="mlp")
    parser.add_argument("--resume", default=None, help="a checkpoint to continue from")
    args = parser.parse_args()
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    pl.seed_everything(0, verbose=False)
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=f"{args.run_dir}/checkpoints", monitor="val_loss",
                                               save_last=True)
    trainer = pl.Trainer(max_steps=args.steps, accelerator="cpu", devices=args.devices,
                         strategy="ddp" if args.devices > 1 else "auto", val_check_interval=args.val_every,
                         check_val_every_n_epoch=None, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0,
                         callbacks=[checkpoints, CockpitCallback(args.run_dir)])
    if args.model == "transformer":
        module, train, val = TokenModel(args.step_s), tokens(2048, 0), tokens(64, 1)
    else:
        module, train, val = Regressor(args.step_s), data(4096, 0), data(256, 1)
    trainer.fit(module, DataLoader(train, batch_size=32, shuffle=True), DataLoader(val, batch_size=64),
                ckpt_path=args.resume)


if __name__ == "__main__":
    main()
