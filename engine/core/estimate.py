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
    #: The settings it was computed for: batch_size, micro_batch, precision, device and the task's declared settings.
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


@dataclass(frozen=True)
class BudgetSummary:
    """What the engine planned with at start-up: ``RunStarted.budget``, typed (bytes; None where unknown).

    Built by engine.budget.hook at start; viewers read these attributes instead of guessing dict keys.
    """

    #: Predicted peak of a training step (None: no prediction, see ``note``).
    predicted: int | None = None
    #: "analytic", "trace" or "" when nothing was predicted.
    source: str = ""
    upper_bound: bool = False
    breakdown: dict[str, int] = field(default_factory=dict)
    #: The settings the prediction is for (engine.budget.settings.describe plus device and phase).
    settings: dict[str, Any] = field(default_factory=dict)
    #: Bytes a step may use (after safety and context reserve); None without a budget (CPU, no --vram-gb).
    budget: int | None = None
    budget_total: int | None = None
    budget_source: str | None = None
    safety: float | None = None
    capacity: int | None = None
    free: int | None = None
    context: int | None = None
    device: str = ""
    device_name: str = ""
    #: Largest batch predicted to fit the budget at the configured settings.
    largest_batch: int | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (as written in events.jsonl)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: "dict[str, Any] | BudgetSummary | None") -> "BudgetSummary":
        """Inverse of ``to_dict``; unknown keys ignored (older runs wrote a few more), missing ones default."""
        if isinstance(data, BudgetSummary):
            return data
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in (data or {}).items() if k in names})
