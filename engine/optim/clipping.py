"""Gradient clipping by global 2-norm through torch's public pair: ``torch.nn.utils.get_total_norm``, then
``torch.nn.utils.clip_grads_with_norm_`` (``clip_grad_norm_`` is these two calls, one after the other).

Why the pair rather than ``clip_grad_norm_``: the step reads the norm on the host
anyway (it is logged, and it decides whether the step is finite), and read
between the two calls it says whether the clip can change anything. torch
multiplies every gradient by ``min(1, max_norm / (norm + 1e-6))``, which is
exactly 1.0 when the norm is under the limit by more than the arithmetic's
rounding, and a multiply by 1.0 leaves every bit where it was. Most steps of a
run are under it (the clip guards against spikes: 94 % of the fast toy's steps),
so there the multiply is skipped. Where the host does not read the norm before
the optimizer steps (the deferred readback, which makes no sync), the multiply
always runs, as in torch's function. Either way the norm and the gradients are
torch's bit for bit (tests compare them with ``clip_grad_norm_``).

``foreach=False`` on CPU: torch's foreach norm and multiply have no CPU kernels
of their own; on CPU they loop over the per-tensor ones (the same numbers).
Asking for the per-tensor path directly skips the list ops' dispatch and
support checks (measured in the fast toy's loop: 16 µs a step less, of ~1 ms).
Elsewhere torch chooses (its foreach kernels on CUDA).
"""

from __future__ import annotations

import math
from typing import Iterable

import torch
from torch.nn.utils import clip_grads_with_norm_, get_total_norm

#: Relative rounding margin, in machine epsilons of the gradients' dtype, below which a norm is certainly under
#: the limit: torch's factor takes three roundings (``norm + 1e-6``, ``max_norm`` in that dtype, the division),
#: at most half an epsilon each.
ROUNDING_EPS = 4


class GradClip:
    """The clip of one model's trained parameters to ``max_norm`` (0 or inf: no clip, the factor is 1.0)."""

    def __init__(self, params: Iterable[torch.Tensor], max_norm: float, device: torch.device) -> None:
        """``params``: what is clipped, in the model's order (the norm's float sum depends on it)."""
        self.params = list(params)
        self.max_norm = max_norm if max_norm > 0 else math.inf
        self.foreach = False if device.type == "cpu" else None
        eps = max((torch.finfo(p.dtype).eps for p in self.params if p.dtype.is_floating_point),
                  default=torch.finfo(torch.float32).eps)
        #: A norm read below this leaves torch's factor at exactly 1.0 (module docstring).
        self.exact_one_below = self.max_norm * (1 - ROUNDING_EPS * eps) - 1e-6
        #: FSDP2: the parameters are DTensor shards and so is the norm (a reduction over the shards).
        self.sharded = any(hasattr(p, "placements") for p in self.params)

    def norm(self) -> torch.Tensor:
        """The global 2-norm of the gradients present (a parameter frozen this step has none), on the device;
        under FSDP2 a DTensor (``full_tensor()`` is its value on every rank)."""
        return get_total_norm([p.grad for p in self.params if p.grad is not None], foreach=self.foreach)

    def apply(self, norm: torch.Tensor, read: float | None = None) -> None:
        """Scale the gradients by torch's factor for ``norm`` (``clip_grads_with_norm_``), unless there is no clip
        ``read``, the norm's value on the host, shows the factor is exactly 1.0 (with no clip: any finite norm;
        torch multiplies by NaN for one that is not, and so does this)."""
        if read is not None and read < self.exact_one_below:
            return
        clip_grads_with_norm_(self.params, self.max_norm, norm, foreach=self.foreach)
