"""A step's logged values on their way to the host without stopping the device: the deferred readback.

Why. The step event logs the loss, the grad norm and the loss parts, and the NaN policy needs to know
whether the step was finite. Read at once (``.tolist()``), that is a host sync every step: on a GPU the
host waits for backward and the optimizer to finish and cannot queue the next step's kernels meanwhile.
Deferred, the finiteness check and the skip stay on the device (engine.optim.optimization's
``step_on_device``: fused AdamW's ``found_inf``), and the values are copied into pinned host memory
without blocking; the host reads them one step later, after it has queued the next step, by waiting on
the copy's CUDA event (long done by then: the device works in order). No stream sync, no ``.item()``.

Both ways a step reaches the host give the loop the same thing, a ``StepResult``, through the same two
calls. ``put(values, result)`` hands over this step's result (its values still on the device, or, for
``HostReadback``, already read) and returns the previous step's, complete, when there is one; ``flush()``
returns the one still in flight (a wait on its event: the sync a checkpoint, an evaluation, a control
or the run's end pays, so that they act on every step before them). On CPU the deferred copy is a plain
one (nothing runs ahead of the host), which is what the tests exercise the same code path with.

Two pinned buffers alternate: one is read while the next is being written. ``is_host(tensor)`` tells
a sync counter (tests) the buffers apart from device tensors: reading them is not a sync.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch


@dataclass(slots=True)
class StepResult:
    """One optimizer step as the host knows it: what its event logs and what the NaN policy counts.

    The deferred path puts it in flight with ``loss``, ``grad_norm``, ``skipped`` and the parts' values
    unknown (the parts' names as keys); ``read`` fills them from the copied values."""

    step: int
    lr: float
    seconds: float
    #: Samples the whole job trained in this step (every rank's).
    samples: int
    loss: float = math.nan
    grad_norm: float = math.nan
    parts: dict[str, float] = field(default_factory=dict)
    skipped: bool = False

    def read(self, host: list[float]) -> StepResult:
        """Fill in the values ``Optimization.step_on_device`` stacked: [loss, grad norm, finite (1/0), *parts]."""
        self.loss, self.grad_norm, self.skipped = host[0], host[1], host[2] == 0.0
        self.parts = dict(zip(self.parts, host[3:]))
        return self


class HostReadback:
    """The synchronous path: a step's values were read before its optimizer step (the NaN policy decided on
    them there), so its result is complete at once."""

    def put(self, values: None, result: StepResult) -> StepResult:
        """``result`` itself (``values`` is None: nothing is in flight)."""
        return result

    def flush(self) -> None:
        """Nothing is ever in flight."""

    def is_host(self, tensor: torch.Tensor) -> bool:
        """No buffers of its own."""
        return False


class StepReadback:
    """Deferred device-to-host copies of each step's values (module docstring)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self._buffers: list[torch.Tensor | None] = [None, None]
        self._events: list = [None, None]
        self._slot = 0
        self._in_flight: tuple[int, StepResult] | None = None  # (slot, result) of the copy not yet read

    def _buffer(self, slot: int, size: int) -> torch.Tensor:
        buffer = self._buffers[slot]
        if buffer is None or buffer.numel() != size:
            buffer = torch.empty(size, dtype=torch.float32, pin_memory=self.cuda)
            self._buffers[slot] = buffer
        return buffer

    def put(self, values: torch.Tensor, result: StepResult) -> StepResult | None:
        """Start copying ``values`` (1-D float32 on the device) to the host; the previous put's result, read."""
        slot = self._slot
        buffer = self._buffer(slot, values.numel())
        buffer.copy_(values, non_blocking=self.cuda)
        if self.cuda:
            event = self._events[slot] or torch.cuda.Event()
            event.record()
            self._events[slot] = event
        previous = self.flush()
        self._in_flight, self._slot = (slot, result), 1 - slot
        return previous

    def flush(self) -> StepResult | None:
        """The result in flight, its copy waited for and read (None when there is none)."""
        if self._in_flight is None:
            return None
        slot, result = self._in_flight
        self._in_flight = None
        if self.cuda:
            self._events[slot].synchronize()  # this copy only: the device keeps the steps queued after it
        return result.read(self._buffers[slot].tolist())

    def drop(self) -> None:
        """Forget the copy in flight (a rollback replaced the state it described)."""
        self._in_flight = None

    def is_host(self, tensor: torch.Tensor) -> bool:
        """True for this readback's host buffers (reading them is no device sync)."""
        return any(tensor is buffer for buffer in self._buffers)


def deferred_readback(mode: str, optim, device: torch.device) -> bool:
    """Whether a run reads its steps back deferred (``runtime.step_readback``): auto on CUDA where the optimizer
    skips on the device; ``deferred`` anywhere it can (CPU too: the tests' path, and a measurement); ValueError
    naming the field where it cannot."""
    if mode == "sync":
        return False
    if not optim.skips_on_device:
        if mode == "deferred":
            raise ValueError("runtime.step_readback=deferred: needs the fused AdamW kernel, which skips a non-finite "
                             "step on the device (not under fp16's grad scaler, not on FSDP2 shards); use auto or sync")
        return False
    return mode == "deferred" or device.type == "cuda"
