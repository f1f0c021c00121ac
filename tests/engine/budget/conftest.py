"""Budget test helpers: one torch thread, a private trace cache, small SensorLM configs that set up fast."""

from __future__ import annotations

import os

import pytest

from engine.core import config as cfg

#: A SensorLM small enough to run two real steps in well under a second: 240 min × 8 ch, 96 patches.
SMALL = {
    "model": {"dim": 32, "depth": 1, "heads": 2, "patch_time": 10, "patch_channels": 2, "text_dim": 32,
              "text_depth": 1, "decoder_depth": 1, "text_heads": 2, "max_caption_tokens": 16, "vocab_size": 128,
              "embed_dim": 32},
    "data": {"channels": 8, "minutes": 240},
    # the step alone: what the data path builds ahead is engine.budget.ahead's (test_never_under)
    "train": {"batch_size": 2},
    "runtime": {"prefetch": False},
}
#: Keys of SMALL and of the cases that belong to the task's own section ([sensorlm.model], [sensorlm.data]).
TASK_KEYS = ("model", "data")


def _merge(base: dict, over: dict) -> dict:
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for key, value in over.items():
        if isinstance(value, dict):
            out.setdefault(key, {}).update(value)
        else:
            out[key] = value
    return out


def small(task: str = "sensorlm", **sections) -> cfg.RunConfig:
    """A small config of ``task``: SMALL for sensorlm, the toy's demo preset otherwise; sections override."""
    if task == "toy":
        return cfg.load(task="toy", overrides=_merge({"runtime": {"prefetch": False}}, sections))
    merged = _merge(SMALL, sections)
    own = {k: merged.pop(k) for k in TASK_KEYS if k in merged}
    return cfg.load(task="sensorlm", preset="demo", overrides={**merged, "sensorlm": own})


@pytest.fixture(autouse=True)
def _budget_env(tmp_path_factory, monkeypatch):
    """One torch thread; traces cached in a private directory; SensorLM fits its tokenizer on 8 windows."""
    import torch

    torch.set_num_threads(1)
    monkeypatch.setenv("SENSORLM_TUI_CACHE", str(tmp_path_factory.getbasetemp() / "budget-cache"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    from engine.tasks.sensorlm.task import SensorLMTask

    monkeypatch.setattr(SensorLMTask, "FIT_SAMPLES", 8)
    yield
    os.environ.get("SENSORLM_TUI_CACHE")
