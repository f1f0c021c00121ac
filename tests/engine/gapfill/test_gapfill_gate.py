"""The overfit gate: 8 frozen samples are learned; a model whose conditioning is cut cannot learn them.

The gate's rule is the engine's (train.overfit_target: final val loss ≤ target × the untrained
one, on the frozen samples, validated on themselves). The frozen samples are what the engine
uses for ``train.overfit = 8``: training indices 0-7 with step-0 damage.
"""

from __future__ import annotations

import pytest
import torch

from engine.tasks.gapfill.task import GapfillTask
from gapfill_helpers import make_config  # pytest puts this test directory on sys.path

STEPS = 300
TARGET = 0.75  # the untrained model is already the blend, so the gate asks for a relative cut, not ~0


def _gate_ratio(tiny_data, conditioned: bool) -> float:
    config = make_config(tiny_data, gapfill={"model": {"conditioned": conditioned}},
                         train={"overfit": 8, "overfit_target": TARGET, "lr": 3e-3})
    task = GapfillTask(config)
    task.setup()
    torch.manual_seed(0)
    model = task.build_model()
    frozen = task.make_batch(list(range(config.train.overfit)), 0, train=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.train.lr, weight_decay=0.0)

    def val_loss() -> float:
        with torch.no_grad():
            return task.eval_batch(model, frozen)["val_loss"]

    first = val_loss()
    for _ in range(STEPS):
        loss, _ = task.loss(model, frozen, 0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return val_loss() / first


@pytest.mark.parametrize("conditioned", [True, False])
def test_overfit_gate_passes_and_fails_with_conditioning_cut(tiny_data, conditioned):
    ratio = _gate_ratio(tiny_data, conditioned)
    passed = ratio <= TARGET
    assert passed == conditioned, f"val loss ratio {ratio:.3f} (gate {TARGET})"
