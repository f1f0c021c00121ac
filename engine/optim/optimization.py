"""Optimizer and precision: AdamW over the task's param groups, autocast, GradScaler, LR schedule, clipping.

The task decides what trains (``Task.param_groups(model)``: every parameter
by default, a LoRA task only its adapters) and how the groups differ; this
component decides how: AdamW with the run's betas/eps, the schedule's LR for
each step (``peak_lr × lr_scale × lr_at(step)``, where ``lr_scale`` is what
NaN rollbacks lowered), bf16 autocast or fp16 with a grad scaler, and a clip
that is applied (engine.optim.clipping: torch's ``get_total_norm`` and
``clip_grads_with_norm_``, the pre-clip norm logged; computing the norm alone
would log a clip that never happens).

Its state for a checkpoint is the optimizer's (tensors apart, JSON apart: see
engine.checkpoint.format), the scaler's and the two LR numbers. ``check`` validates
a checkpoint's optimizer tensors against this model before anything loads.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Callable

import torch

from engine.checkpoint import format as ckpt
from engine.core.core_sections import OptimizerConfig, ScheduleConfig
from engine.optim.clipping import GradClip
from engine.optim.fused import fused_adamw
from engine.optim.schedule import lr_at


def adamw(groups: list[dict], optimizer: OptimizerConfig, precision: str) -> torch.optim.Optimizer:
    """AdamW with the run's betas/eps over ``groups``: fused where ``engine.optim.fused`` says the run allows it
    (at ``precision``) and every parameter is a plain tensor on a device with the kernel (not a DTensor shard)."""
    params = [p for group in groups for p in group["params"]]
    fused = bool(params) and fused_adamw(precision, sharded=False) and all(
        not hasattr(p, "placements") and p.device.type in ("cpu", "cuda") and p.dtype.is_floating_point
        for p in params)
    return torch.optim.AdamW(groups, lr=optimizer.lr, betas=tuple(optimizer.betas), eps=optimizer.eps,
                             **({"fused": True} if fused else {}))


def accumulate(total: torch.Tensor | None, value: torch.Tensor, weight: float) -> torch.Tensor:
    """``total + value * weight`` without the ops a single micro-batch does not need (×1.0 and 0 + x are exact,
    so the numbers are identical; at 1,000 steps/s each skipped op is ~0.5 % of the step)."""
    value = value if weight == 1.0 else value * weight
    return value if total is None else total + value


def as_float(value: torch.Tensor) -> torch.Tensor:
    """``value`` in float32: itself when it already is (``.float()`` costs a dispatcher call even then, ~1 µs,
    and a step makes two or more of them)."""
    return value if value.dtype is torch.float32 else value.float()


class Optimization:
    """AdamW + precision + schedule + clipping for one model."""

    def __init__(self, optimizer: OptimizerConfig, schedule: ScheduleConfig, precision: str, model: torch.nn.Module,
                 groups: list[dict], device: torch.device, total_steps: int,
                 lr_fault: Callable[[int], float] | None = None) -> None:
        """The run's ``optimizer`` and ``schedule`` sections and ``runtime.precision``; ``groups`` are torch param
        groups (``Task.param_groups(model)``); ``total_steps`` shapes the schedule; ``lr_fault(step)``, a test hook
        (engine.training.faults' ``lr@A-B=F``), multiplies step ``step``'s LR."""
        self.schedule = schedule
        self.lr_fault = lr_fault
        self.total_steps = total_steps
        #: Peak LR (``set lr`` changes it) and the multiplier NaN rollbacks lower.
        self.peak_lr = optimizer.lr
        self.lr_scale = 1.0
        #: The clip over what trains, in the model's order (the norm's float sum depends on it), and what the
        #: optimizer's state is indexed by (the groups' order).
        self.clip = GradClip([p for p in model.parameters() if p.requires_grad], optimizer.clip_grad_norm, device)
        self.params = [p for group in groups for p in group["params"]]
        self.optimizer = adamw(groups, optimizer, precision)
        self.scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        self._autocast: Callable = (lambda: torch.autocast(device.type, dtype=dtype)) if dtype else nullcontext
        #: How ``step`` brings the step's values to the host: "stacked" (one tensor, one transfer) where a read
        #: waits for the device; "each" (``.item()`` per value) on CPU, where no read waits and the stack is
        #: one more allocation and kernel a step (~1.5 % of a 1.4 ms step). bench.host_syncs counts the
        #: "stacked" path, the one a CUDA run takes.
        self.host_read = "each" if device.type == "cpu" else "stacked"

    def autocast(self):
        """The forward pass's precision context."""
        return self._autocast()

    def zero_grad(self) -> None:
        """Drop the optimizer's gradients (set to None: their memory is free until the next backward)."""
        self.optimizer.zero_grad(set_to_none=True)

    def backward(self, loss: torch.Tensor) -> None:
        """Backward through the scaler (a no-op scale unless fp16)."""
        self.scaler.scale(loss).backward()

    def lr(self, step: int) -> float:
        """The LR for optimizer step ``step``."""
        s = self.schedule
        lr = self.peak_lr * self.lr_scale * lr_at(step, self.total_steps, 1.0, s.kind, s.warmup_frac, s.cooldown_frac,
                                                  s.min_lr_frac)
        return lr if self.lr_fault is None else lr * self.lr_fault(step)

    @property
    def skips_on_device(self) -> bool:
        """True when a non-finite step can be skipped without the host looking: the fused AdamW kernel takes a
        ``found_inf`` flag (the foreach and loop kernels do not), and no grad scaler owns that flag (fp16)."""
        return bool(self.optimizer.defaults.get("fused")) and not self.scaler.is_enabled()

    def _prepare(self, step: int) -> tuple[float, torch.Tensor]:
        """Set the step's LR on every group, unscale; (lr, the gradients' norm on the device, not yet clipped)."""
        lr = self.lr(step)
        for group in self.optimizer.param_groups:
            # A group's ``lr_mult`` (Task.param_groups) scales the schedule for it, e.g. LoRA+'s lora_B groups
            # at lr × ratio: the warm-up and the decay still apply to every group.
            group["lr"] = lr * group.get("lr_mult", 1.0)
        self.scaler.unscale_(self.optimizer)
        return lr, self.clip.norm()

    def step_on_device(self, step: int, loss: torch.Tensor, parts: dict[str, torch.Tensor]
                       ) -> tuple[torch.Tensor, float]:
        """The step with no host sync (``skips_on_device`` runs only): the finiteness check and the skip stay on
        the device, fused AdamW's ``found_inf`` (the protocol torch's GradScaler uses: set on the optimizer for
        one ``step()``; the kernel leaves parameters, moments and step counts as they were when it is 1).

        Returns ([loss, grad norm, finite (1/0), *parts in ``parts``' order] as one float32 device tensor, lr).
        Under DDP and FSDP2 every rank gets the same flag without a collective: the loss is all-reduced and the
        gradients, hence their norm, are the same on every rank.
        """
        lr, norm = self._prepare(step)
        self.clip.apply(norm)
        grad_norm = norm.full_tensor() if self.clip.sharded else norm
        finite = torch.isfinite(loss) & torch.isfinite(grad_norm)
        self.optimizer.found_inf = (~finite).float()
        try:
            self.optimizer.step()
        finally:
            del self.optimizer.found_inf
        values = torch.stack([loss.float(), grad_norm.float(), finite.float(), *(v.float() for v in parts.values())])
        return values, lr

    def step(self, step: int, loss: torch.Tensor, parts: dict[str, torch.Tensor], skip: Callable[[bool], bool]
             ) -> tuple[tuple[float, float, dict[str, float]], float, bool]:
        """Set the LR, unscale, clip, and step unless ``skip(finite)`` says so.

        Returns ((loss, grad norm, parts) as floats, lr, skipped). The step's one device sync: the
        finiteness decision must be made before ``optimizer.step()``, and the values the step event
        logs come back in the same transfer (not 2 + n more ``.item()`` syncs later; on CPU, where a
        read waits for nothing, they are read one by one: ``host_read``). The read comes before the clip's
        multiply, which the norm's value then skips where it is by 1.0 (engine.optim.clipping).
        """
        lr, norm = self._prepare(step)
        grad_norm = norm.full_tensor() if self.clip.sharded else norm
        if self.host_read == "each":
            values = (loss.item(), grad_norm.item(), {name: value.item() for name, value in parts.items()})
        else:
            names = list(parts)
            host = torch.stack([loss, grad_norm.float(), *(parts[k] for k in names)]).tolist()
            values = (host[0], host[1], dict(zip(names, host[2:])))
        self.clip.apply(norm, read=values[1])
        if self.scaler.is_enabled():
            # Under fp16 inf gradients are the scaler's business (it skips the step and lowers the scale);
            # only a non-finite loss counts as a bad step.
            skipped = skip(math.isfinite(values[0]))
            if not skipped:
                self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            skipped = skip(math.isfinite(values[0]) and math.isfinite(values[1]))
            if not skipped:
                self.optimizer.step()
        return values, lr, skipped

    def state_dict(self) -> tuple[dict[str, torch.Tensor], dict]:
        """(optimizer tensors, JSON: optimizer groups/scalars, scaler, peak_lr, lr_scale)."""
        tensors, meta = ckpt.optimizer_tensors(self.optimizer)
        return tensors, {"optimizer": meta, "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else {},
                         "peak_lr": self.peak_lr, "lr_scale": self.lr_scale}

    def check(self, tensors: dict[str, torch.Tensor], meta: dict) -> None:
        """ValueError naming the first optimizer tensor or group that does not fit these parameters."""
        groups = meta["optimizer"]["param_groups"]
        if not isinstance(groups, list) or len(groups) != len(self.optimizer.param_groups):
            raise ValueError(f"optimizer: {len(groups) if isinstance(groups, list) else groups!r} param groups, "
                             f"this model has {len(self.optimizer.param_groups)}")
        for saved, live in zip(groups, self.optimizer.param_groups):
            if not isinstance(saved, dict) or not isinstance(saved.get("params"), list) \
                    or len(saved["params"]) != len(live["params"]):
                raise ValueError("optimizer: param groups do not match this model's")
        for name, tensor in tensors.items():
            if not name.startswith("optim."):
                continue
            _, index, key = name.split(".", 2)
            if not index.isdigit() or int(index) >= len(self.params):
                raise ValueError(f"{name}: no parameter {index} in this model")
            want = () if key == "step" else tuple(self.params[int(index)].shape)
            scalar = tensor.dim() == 0 and want == (1,)  # restore_optimizer reshapes it (a former 0-dim parameter)
            if tuple(tensor.shape) != want and not scalar:
                raise ValueError(f"{name}: shape {tuple(tensor.shape)}, this model needs {want}")

    def load_state_dict(self, tensors: dict[str, torch.Tensor], meta: dict) -> None:
        """Restore what ``state_dict`` saved (``check`` it first)."""
        ckpt.restore_optimizer(self.optimizer, tensors, meta["optimizer"])
        self.load_scalars(meta)

    def load_scalars(self, meta: dict) -> None:
        """Restore the scaler and the two LR numbers (the optimizer's tensors come from the checkpoint's format)."""
        if meta.get("scaler") and self.scaler.is_enabled():
            self.scaler.load_state_dict(meta["scaler"])
        self.peak_lr, self.lr_scale = meta["peak_lr"], meta["lr_scale"]
