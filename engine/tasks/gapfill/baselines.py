"""The reference lines: nearest frame, linear interpolation in time, and the untrained blend.

All three read the same validation samples as the model. Nearest and linear
use calibrated but *unaligned* neighbours (what a pipeline without the
rotation physics would do); the blend uses the aligned ones with the prior
weights, i.e. exactly the untrained model. A sample with no usable neighbour
at all gets zeros from every method (and from the model, before it learns).
"""

from __future__ import annotations

import torch

from engine.tasks.gapfill.model import blend, prior_log_weights
from engine.tasks.gapfill.spec import METHODS  # noqa: F401 - the keys of all_methods, declared with the spec


def nearest(unaligned: torch.Tensor, present: torch.Tensor, hours: torch.Tensor) -> torch.Tensor:
    """The present neighbour closest in time (earlier one on a tie), unaligned: (N, B, H, W)."""
    distance = torch.where(present > 0, hours.abs() - 1e-6 * hours.sign(), torch.full_like(hours, float("inf")))
    index = distance.argmin(dim=1)
    picked = unaligned[torch.arange(len(index), device=index.device), index]
    return picked * (present.sum(1) > 0).float()[:, None, None, None]


def linear(unaligned: torch.Tensor, present: torch.Tensor, hours: torch.Tensor) -> torch.Tensor:
    """Linear interpolation in time between the nearest earlier and later neighbours (nearest if one side only)."""
    before = torch.where((present > 0) & (hours > 0), hours, torch.full_like(hours, float("inf")))
    after = torch.where((present > 0) & (hours < 0), -hours, torch.full_like(hours, float("inf")))
    b_i, a_i = before.argmin(1), after.argmin(1)
    rows = torch.arange(len(b_i), device=b_i.device)
    tb, ta = before[rows, b_i], after[rows, a_i]
    both = torch.isfinite(tb) & torch.isfinite(ta)
    wa = torch.where(both, tb / (tb + ta).clamp(min=1e-9), torch.zeros_like(tb))  # weight of the later frame
    interp = (1 - wa)[:, None, None, None] * unaligned[rows, b_i] + wa[:, None, None, None] * unaligned[rows, a_i]
    return torch.where(both[:, None, None, None], interp, nearest(unaligned, present, hours))


def prior_blend(aligned: torch.Tensor, visible: torch.Tensor, present: torch.Tensor, hours: torch.Tensor
                ) -> torch.Tensor:
    """The untrained model's answer: prior-weighted blend of the aligned neighbours."""
    out = blend(aligned, prior_log_weights(present, hours, visible))
    return out * (present.sum(1) > 0).float()[:, None, None, None]


def all_methods(aligned, unaligned, visible, present, hours) -> dict[str, torch.Tensor]:
    """Every baseline's prediction, keyed by METHODS."""
    return {"nearest": nearest(unaligned, present, hours), "linear": linear(unaligned, present, hours),
            "blend": prior_blend(aligned, visible, present, hours)}
