"""Shared pieces for the lm task's tests: a fixed generated corpus and a config builder.

Importing transformers costs seconds on the 2-core box, so the tests share
module-scoped fixtures and use the `tiny` preset (hidden 32, 2 layers, vocab 256).
"""

from __future__ import annotations

import random
import types
from pathlib import Path

import pytest

WORDS = ("the model reads a token and predicts the next one while the loss falls over many steps "
         "adapters learn a low rank update and the norms may train too").split()


def corpus_text(seed: int = 0, words: int = 6000) -> str:
    """A fixed pseudo-English corpus: sentences of the words above, one per line."""
    rng = random.Random(seed)
    lines = []
    while words > 0:
        n = rng.randint(5, 14)
        lines.append(" ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + ".")
        words -= n
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory) -> Path:
    """A ~40 kB text file every test may read (never written to)."""
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text(corpus_text())
    return path


def make_config(data_path=None, train: dict | None = None, **lm_overrides):
    """A run config in the target shape (``task_config`` = the [lm] section) from the `tiny` preset."""
    from engine.config import TrainConfig
    from engine.tasks.lm.spec import PRESETS, LMConfig

    preset = PRESETS["tiny"]
    lm = dict(preset["lm"])
    for key, value in lm_overrides.items():
        lm[key] = {**lm.get(key, {}), **value} if isinstance(value, dict) else value
    return types.SimpleNamespace(
        task_config=LMConfig.model_validate(lm),
        train=TrainConfig(**{**preset["train"], **(train or {})}),
        data=types.SimpleNamespace(path=None if data_path is None else str(data_path)),
        task=types.SimpleNamespace(name="lm", preset="tiny"))
