"""The memory estimator the tune screen asks, as an injectable callable.

The contract: ``estimator(config, batch_size=…, attn_backend=…,
attn_chunk=…)`` returns an object with ``.total`` (bytes) and ``.breakdown``
(name → bytes). ``config`` is the run's ``engine.config.RunConfig`` (the one
the CLI resolved, or ``RunStarted.config`` validated back into one; the raw
dict only when that fails). Tests inject a fake; the app uses the torch-free
analytic model ``engine.budget.analytic.estimate`` when it is importable.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

#: An estimator as the dashboard calls it.
Estimator = Callable[..., Any]


class EstimateError(Exception):
    """The estimator failed or returned something without a total; one line for the tune screen."""


def default_estimator() -> Optional[Estimator]:
    """engine.budget.analytic.estimate (torch-free closed form)."""
    from engine.budget.analytic import estimate

    return estimate


def predict(estimator: Optional[Estimator], config: Any, **settings: Any) -> tuple[int, dict]:
    """(total bytes, breakdown) for ``settings``; EstimateError with a one-line reason otherwise."""
    if estimator is None:
        raise EstimateError("no memory estimator available")
    try:
        result = estimator(config, **settings)
    except Exception as exc:  # noqa: BLE001 - any estimator failure is shown, never raised into the UI
        text = str(exc).strip().splitlines()
        raise EstimateError(text[0] if text else type(exc).__name__) from None
    total = getattr(result, "total", None)
    if not isinstance(total, (int, float)) or total <= 0:
        raise EstimateError(f"estimator returned no total ({type(result).__name__})")
    return int(total), dict(getattr(result, "breakdown", {}) or {})
