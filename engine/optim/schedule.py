"""Learning-rate schedules as pure functions of the step (so resuming needs only the step number).

All schedules start with a linear warm-up over ``warmup_frac`` of the steps
(from lr/warmup_steps, never 0, so step 0 already learns).
- constant: the peak LR after warm-up.
- cosine: half-cosine from the peak to ``min_lr_frac``·peak at the last step.
- rsqrt: peak·sqrt(warmup/step) after warm-up, then a linear cool-down to 0
  over the last ``cooldown_frac`` of the steps (a schedule that needs no
  total length until the cool-down).
- onecycle: warm-up, then cosine annealing to ``min_lr_frac``·peak
  (PyTorch's OneCycleLR shape with a linear rise).
"""

from __future__ import annotations

import math


def warmup_steps(total: int, warmup_frac: float) -> int:
    """Steps of the linear warm-up of a ``total``-step run (the abort policy is not armed before they are done)."""
    return int(round(warmup_frac * max(1, total)))


def lr_at(step: int, total: int, peak: float, kind: str, warmup_frac: float,
          cooldown_frac: float = 0.0, min_lr_frac: float = 0.0) -> float:
    """The learning rate for optimizer step ``step`` (0-based) of ``total``."""
    total = max(1, total)
    warmup = warmup_steps(total, warmup_frac)
    if warmup and step < warmup:
        return peak * (step + 1) / warmup
    floor = peak * min_lr_frac
    if kind == "constant":
        return peak
    progress = min(1.0, (step - warmup) / max(1, total - warmup - 1))
    if kind in ("cosine", "onecycle"):
        return floor + (peak - floor) * 0.5 * (1 + math.cos(math.pi * progress))
    if kind == "rsqrt":
        base = peak * math.sqrt(max(1, warmup) / max(1, step + 1)) if step >= warmup else peak
        base = min(peak, base)
        cooldown = int(round(cooldown_frac * total))
        if cooldown and step >= total - cooldown:
            base *= max(0.0, (total - step) / cooldown)
        return base
    raise ValueError(f"unknown schedule {kind!r}")
