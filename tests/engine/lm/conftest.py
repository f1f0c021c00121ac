"""Shared pieces for the lm task's tests: a fixed generated corpus and a config builder.

Importing transformers costs seconds on the 2-core box, so the tests share
module-scoped fixtures and use the `tiny` preset (hidden 32, 2 layers, vocab 256).
"""

from __future__ import annotations

import random
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


def make_config(data_path=None, train: dict | None = None, optimizer: dict | None = None,
                schedule: dict | None = None, evaluation: dict | None = None, runtime: dict | None = None, **lm):
    """A resolved run config of the `lm` task: the `tiny` preset with ``lm`` and the shared sections' overrides."""
    from engine.core.config import load

    shared = {"train": train, "optimizer": optimizer, "schedule": schedule, "evaluation": evaluation,
              "runtime": runtime}
    overrides = {"lm": lm, **{k: v for k, v in shared.items() if v}, "data": {"path": None if data_path is None
                                                                            else str(data_path)}}
    return load(task="lm", preset="tiny", overrides=overrides)
