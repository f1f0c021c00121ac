"""The gap-filler's U-Net compiled level by level under bf16 autocast: the same losses as eager.

``aot_eager`` (the wiring: each level, all ``nn.Sequential`` of other shapes, gets its own compiled function
and none recompiles another); inductor's kernels are the toy's test (tests/engine/test_compile.py).
"""

from __future__ import annotations

import pytest

from engine.core import config as cfg
from tests.engine.compile_check import assert_close, compare

pytestmark = pytest.mark.slow


def test_gapfill_levels_compile_under_bf16_autocast_and_match_eager(tiny_data) -> None:
    config = cfg.load(task="gapfill", overrides={
        "gapfill": {"model": {"base": 8, "depth": 1},
                    "samples": {"neighbours": 2, "short_max": 2, "long_min": 4, "long_max": 12, "max_hours": 48,
                                "val_samples": 8}},
        "data": {"path": str(tiny_data)}, "train": {"max_steps": 2, "batch_size": 4}, "evaluation": {"every": 0},
        "runtime": {"precision": "bf16"},
        "checkpoint": {"every_steps": 0}})
    eager, compiled = compare(config, "blocks", "aot_eager")
    assert_close(eager.losses, compiled.losses, rel=1e-6)
    units = compiled.trainer.task.compile_units(compiled.trainer.model)
    first = compiled.of("compile")[0]
    # One compiled function per kind of level, each compiled once; none recompiles another.
    assert first.frames == len({id(u.forward.__func__) for u in units}) >= 2
    assert compiled.trainer.compiler.recompiles == 0
