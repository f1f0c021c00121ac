"""The knobs the budget varies, applied to a RunConfig: batch size, backend, chunk, precision, checkpointing.

Torch-free. ``with_settings`` returns a validated copy, so a bad value is the
config's own one-line error naming the field.
"""

from __future__ import annotations

from engine.config import RunConfig, validate

#: Setting name → (config section, field).
FIELDS = {
    "batch_size": ("train", "batch_size"),
    "grad_accum": ("train", "grad_accum"),
    "precision": ("train", "precision"),
    "attn_backend": ("model", "attn_backend"),
    "attn_chunk": ("model", "attn_chunk"),
    "checkpointing": ("model", "activation_checkpointing"),
}


def with_settings(config: RunConfig, **settings) -> RunConfig:
    """A validated copy of ``config`` with the given settings (None values leave a field alone)."""
    changes = {k: v for k, v in settings.items() if v is not None}
    if not changes:
        return config
    data = config.model_dump()
    for name, value in changes.items():
        if name not in FIELDS:
            raise KeyError(name)
        section, field = FIELDS[name]
        data[section][field] = value
    return validate(data, "settings")


def describe(config: RunConfig) -> dict:
    """The settings of ``config`` as a plain dict (what an Estimate's ``settings`` records)."""
    t, m = config.train, config.model
    return {
        "batch_size": t.batch_size,
        "grad_accum": t.grad_accum,
        "micro_batch": -(-t.batch_size // t.grad_accum),  # torch.chunk: the first micro-batch is the largest
        "precision": t.precision,
        "attn_backend": m.attn_backend,
        "attn_chunk": m.attn_chunk,
        "checkpointing": m.activation_checkpointing,
    }
