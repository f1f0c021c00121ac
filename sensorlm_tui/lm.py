"""The ``lm`` task's models outside the engine: the base an exported adapter was trained on.

An adapter trained on a random base (no ``lm.model.path``) names no base in its ``adapter_config.json``;
``base_model(run_dir)`` rebuilds that base from the run's ``config.toml`` and seed, bit for bit, for
``PeftModel.from_pretrained(base_model(run_dir), adapter_dir)`` (docs/LM.md). torch and transformers are
imported when it is called.
"""

from __future__ import annotations

from pathlib import Path


def base_model(run_dir: str | Path):
    """The base causal LM of the ``lm`` run in ``run_dir`` (the model at its ``lm.model.path``, or its random
    base drawn again from ``train.seed``), in fp32 on the CPU."""
    from engine.core.config import load_resolved
    from engine.tasks.lm.model import run_base

    return run_base(load_resolved(Path(run_dir) / "config.toml"))


__all__ = ["base_model"]
