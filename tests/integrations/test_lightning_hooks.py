"""The callback's per-step cost: Lightning runs only the hooks that have work, and nothing they report is lost.

Lightning calls every callback's hook (the base class's no-ops too) inside a profiler context, and skips a hook
that is not callable. The callback sets the four per-step hooks it does not use to None, and arms its batch-start
hook only for a step with work: the first batch, a checkpoint to name, a step whose storages are counted.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

pl = pytest.importorskip("lightning.pytorch")

from engine.app.integrations.lightning_callback import UNUSED_STEP_HOOKS, CockpitCallback  # noqa: E402
from engine.budget.hook import CALIBRATE_AT  # noqa: E402
from tests.integrations.conftest import kinds  # noqa: E402

STEPS = 40
SAVE_EVERY = 15


def test_batch_start_runs_only_on_steps_with_work_and_every_checkpoint_is_still_named(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    import torch
    from torch import nn

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    started: list[int] = []
    original = CockpitCallback.on_train_batch_start

    def counted(self, trainer, pl_module, batch, batch_idx):
        started.append(trainer.global_step + 1)
        return original(self, trainer, pl_module, batch, batch_idx)

    monkeypatch.setattr(CockpitCallback, "on_train_batch_start", counted)

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(4, 1)

        def training_step(self, batch, index):
            return nn.functional.mse_loss(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-2)

    run = tmp_path / "run"
    cockpit = CockpitCallback(run)
    assert all(getattr(cockpit, hook) is None for hook in UNUSED_STEP_HOOKS)
    saver = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=SAVE_EVERY, save_top_k=-1)
    torch.manual_seed(0)
    batches = [(torch.randn(4, 4), torch.randn(4, 1)) for _ in range(8)]
    trainer = pl.Trainer(max_steps=STEPS, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
                         callbacks=[cockpit, saver])
    trainer.fit(Tiny(), train_dataloaders=torch.utils.data.DataLoader(batches, batch_size=None))

    assert 1 in started and CALIBRATE_AT in started  # the announcement and the counted step
    assert {SAVE_EVERY + 1, 2 * SAVE_EVERY + 1} <= set(started)  # the batch after each save names it
    assert len(started) <= 8, f"batch-start ran on {len(started)} of {STEPS} steps: {started}"
    named = {Path(e["path"]).name for e in kinds(run, "checkpoint")}
    written = {path.name for path in (tmp_path / "ckpt").glob("*.ckpt")}
    assert len(written) == STEPS // SAVE_EVERY and written <= named, (written, named)
    memory = [e for e in kinds(run, "memory") if e.get("peak")]
    assert memory and memory[0]["step"] == CALIBRATE_AT  # the counted step's peak still reaches the log
