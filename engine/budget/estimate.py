"""The result every predictor returns: a peak in bytes, what it is made of, and how it was obtained.

Torch-free. Breakdown keys are shared by the analytic and traced predictors
where they mean the same thing (``weights``, ``grads``, ``optimizer``,
``input``), so a table can show both side by side; component keys
(``activations: sensor encoder`` …) are the analytic model's own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Estimate:
    """Predicted peak memory of one training step (bytes) and its composition at the peak."""

    #: Peak bytes of tensors alive at once during two optimizer steps.
    total: int
    #: Category or component → bytes at the peak; sums to ``total``.
    breakdown: dict[str, int] = field(default_factory=dict)
    #: True when the number is an upper bound by construction (the analytic model), False for a trace.
    upper_bound: bool = True
    #: "analytic", "trace" or "measured".
    source: str = "analytic"
    #: The settings it was computed for: batch_size, micro_batch, attn_backend, attn_chunk, precision, checkpointing, device.
    settings: dict[str, Any] = field(default_factory=dict)
    #: Trace only: activations kept by each module after its forward (module path → bytes).
    modules: dict[str, int] = field(default_factory=dict)
    #: Seconds it took to compute (0 for the analytic estimate).
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (for RunStarted.budget, the plan's --json and the trace cache)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Estimate":
        """Inverse of ``to_dict`` (unknown keys ignored, so older cache files still load)."""
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})
