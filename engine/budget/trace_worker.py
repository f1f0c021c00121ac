"""Subprocess side of the traced estimate: two optimizer steps under FakeTensorMode + MemTracker.

Run as ``python -m engine.budget.trace_worker REQUEST.json RESULT.json``. The
request holds a resolved config (``config``) and the device type to fake
(``device``). Nothing is allocated for real: the model is built inside the
fake mode (so its parameters are fake too) and batches are uninitialised fake
tensors, which makes the trace cost the same at batch 1 and batch 512 and
lets it describe a step far larger than this machine's RAM.

It is a subprocess because the failure modes are process-fatal: on a
CPU-only torch build, fake CUDA tensors abort the interpreter in backward,
and a model bug can segfault. The parent (engine.budget.trace) only ever
asks for ``cuda`` on a CUDA build.

The result: the peak and its split by MemTracker category, the activations
each module keeps after its forward (last call, depth ≤ 3), the bytes of the
trainable parameters (what DDP's gradient buckets copy), the bytes of one
micro-batch (what each batch the data path builds ahead costs:
engine.budget.ahead), and the wall time and peak RSS of the trace itself.

``strategy = "fsdp2"`` with ``world`` W traces one rank of a W-rank FSDP2 job
on a fake process group (``init_process_group("fake")``: collectives return
at once, nothing is sent): the model is sharded as a run shards it
(the task's ``shard_units``, then the root: engine.distributed.fsdp) and ``FSDPMemTracker`` follows the sharded and
unsharded parameters, the all-gather and reduce-scatter buffers and the
gradients as FSDP2 frees and makes them. The config's batch is already the
rank's share.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from contextlib import contextmanager


def _module_activations(tracker, device) -> dict[str, int]:
    """module path → activation bytes its last forward left alive (POST_FW − PRE_FW of the ACT category)."""
    from torch.distributed._tools.mem_tracker import _MemRefType, _ModState

    out: dict[str, int] = {}
    for stats in tracker.memory_tracking.values():
        name = stats.mod_fqn
        if name.count(".") > 2:
            continue
        pre = stats.snapshots.get(_ModState.PRE_FW)
        post = stats.snapshots.get(_ModState.POST_FW)
        if not pre or not post:
            continue
        before = pre[-1].get(device, {}).get(_MemRefType.ACT, 0)
        after = post[-1].get(device, {}).get(_MemRefType.ACT, 0)
        out[name] = int(after - before)
    return dict(sorted(out.items()))


class _NoHook:
    """Stands in for a hook handle on a parameter that has no gradient hook (MemTracker removes handles on exit)."""

    def remove(self) -> None:
        """Nothing was registered."""


def tracker_class():
    """MemTracker that tracks only the global peak and accepts a top-level module being called again.

    Stock MemTracker raises on a second top-level call of a module in one
    tracking session; the peak it keeps is global, so starting that module's
    per-module stats afresh loses nothing we report.
    """
    from torch.distributed._tools.mem_tracker import MemTracker

    class Tracker(MemTracker):
        def _update_peak_stats(self, peak_state):  # noqa: ARG002 - torch's signature
            # Global peak only. Stock MemTracker also walks every tracked module on every op to keep
            # per-module peaks (O(ops × modules): 65 of 93 s for `base`); we report per-module
            # activations from the pre/post-forward snapshots instead.
            for dev, snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < snap["Total"]:
                    self._peak_mem[dev] = snap["Total"]
                    self._peak_mem_snap[dev] = dict(snap)

        def _track_module_params_and_buffers(self, module, install_grad_hooks=True):
            # Stock MemTracker hooks every parameter's gradient, and registering a hook on a frozen one
            # raises; a LoRA model is mostly frozen. A frozen parameter never gets a gradient, so it gets
            # a do-nothing handle instead of a hook.
            for param in module.parameters():
                if not param.requires_grad:
                    self._param_to_grad_hook_handles.setdefault(param, (_NoHook(), _NoHook()))
            return super()._track_module_params_and_buffers(module, install_grad_hooks)

        def _pre_fw_hook(self, module, inputs):  # noqa: D401 - torch's hook signature
            if module in self.memory_tracking and not self._mod_tracker.is_bw:
                name = self._mod_tracker.get_known_fqn(module)
                if set(self._mod_tracker.parents) - {name} == {"Global"}:
                    del self.memory_tracking[module]
            super()._pre_fw_hook(module, inputs)

    return Tracker


@contextmanager
def skipped_init():
    """Make ``torch.nn.init``'s in-place initialisers no-ops while a model is built on fake tensors.

    Initial values cannot change memory, and some initialisers are
    data-dependent (torch 2.13's ``trunc_normal_`` branches on ``mask.any()``),
    which a fake tensor cannot answer.
    """
    import torch.nn.init as init

    saved = {name: fn for name, fn in vars(init).items() if name.endswith("_") and not name.startswith("_")
             and callable(fn)}
    try:
        for name in saved:
            setattr(init, name, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for name, fn in saved.items():
            setattr(init, name, fn)


#: MemTracker category → our breakdown key.
CATEGORY_KEYS = {
    "Parameter": "weights",
    "Buffer": "buffers",
    "Gradient": "grads",
    "Optstate": "optimizer",
    "Activation": "activations",
    "Temp": "backward transient",
    "Other": "input",
}


#: FSDPMemTracker category → our breakdown key (one rank of an FSDP2 job).
FSDP_CATEGORY_KEYS = {
    "Sharded Param": "weights (this rank's shard)",
    "Unsharded Param": "gathered parameters",
    "Buffer": "buffers",
    "Sharded Grad": "grads (this rank's shard)",
    "Unsharded Grad": "unsharded grads",
    "Activation": "activations",
    "Temp": "backward transient",
    "All Gather": "all-gather buffers",
    "Reduce Scatter": "reduce-scatter buffers",
    "OptState": "optimizer",
    "Inputs": "input",
}


def _result(snap: dict, keys: dict, start: float, device, modules: dict, trainable: int) -> dict:
    import torch

    categories: dict[str, int] = {}
    total = 0
    for key, value in snap.items():
        name = getattr(key, "value", str(key))
        if name == "Total":
            total = int(value)
            continue
        label = keys.get(name, name)
        categories[label] = categories.get(label, 0) + int(value)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "peak": total,
        "breakdown": categories,
        "modules": modules,
        "trainable_bytes": trainable,
        "seconds": time.perf_counter() - start,
        "max_rss": usage.ru_maxrss * 1024,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "device": device.type,
        "torch": torch.__version__,
    }


def _trainable_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def batch_bytes(template: dict, config) -> int:
    """Bytes of the step's first (largest) micro-batch as the task makes it (its batch-first tensors)."""
    import math

    from engine.budget import step as stepmod
    from engine.budget.analytic import micro_batches

    micro = micro_batches(config.train.batch_size, config.train.grad_accum)[0]
    return sum(micro * math.prod(spec[0]) * spec[1].itemsize for spec in template.values() if stepmod.is_spec(spec))


@contextmanager
def deepcopy_as_clone():
    """While a model is built on fake tensors, a deep copy of one (peft's ``modules_to_save`` copies the norms that
    ``lm.lora.train_norms`` trains) is a clone in the same fake mode. Torch's default deep-copies the storage and
    wraps it again: a tensor of another fake mode, which the first op mixing the two refuses ("Mixing fake modes
    NYI") and which crashes the interpreter when it is freed."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    def clone(self, memo):
        if id(self) not in memo:
            copied = self.detach().clone()
            memo[id(self)] = torch.nn.Parameter(copied, self.requires_grad) \
                if isinstance(self, torch.nn.Parameter) else copied.requires_grad_(self.requires_grad)
        return memo[id(self)]

    saved = FakeTensor.__dict__.get("__deepcopy__")
    FakeTensor.__deepcopy__ = clone
    try:
        yield
    finally:
        if saved is None:
            del FakeTensor.__deepcopy__
        else:
            FakeTensor.__deepcopy__ = saved


#: Modules whose exceptions say the trace cannot follow the step on fake tensors (no values, no fake kernel): a limit
#: of the trace, not a fault of the task's code.
TRACE_LIMITS = ("torch._subclasses", "torch.fx.experimental")


@contextmanager
def task_code(task, method: str):
    """Around a call of the task's own ``method``: what it raises becomes a TaskError naming the function and the
    exception ("plugin_mod:Task.make_batch raised ValueError: …"), which the engine says in one line (exit 2, no
    run directory made) instead of a failed trace's traceback. A TaskError (the task refusing its input) and the
    trace's own limits pass through as they are."""
    from engine.tasks.protocol import TaskError

    try:
        yield
    except TaskError:
        raise
    except Exception as exc:
        if type(exc).__module__.startswith(TRACE_LIMITS):
            raise
        text = (str(exc).strip().splitlines() or [""])[0][:200]
        where = f"{type(task).__module__}:{type(task).__qualname__}.{method}"
        raise TaskError(f"{where} raised {type(exc).__name__}{': ' + text if text else ''} (called by the memory "
                        "trace)") from None


def _prepared(config, device_type: str):
    """The task set up (one torch thread), its batch template and the traced device: what both traces start from."""
    import torch

    from engine.budget import step as stepmod
    from engine.core.registry import load_task_class

    torch.set_num_threads(1)
    task = load_task_class(config.task.name)(config)
    with task_code(task, "setup"):
        task.setup()
    with task_code(task, "make_batch"):
        template = stepmod.batch_template(task)
    device = torch.device(device_type, 0) if device_type == "cuda" else torch.device("cpu")
    return task, template, device


def trace_fsdp(config, device_type: str, world: int) -> dict:
    """One rank of a ``world``-rank FSDP2 job, traced on a fake process group (module docstring)."""
    import torch
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from engine.budget import step as stepmod
    from engine.distributed.fsdp import precision_policy, vectorize_scalars

    start = time.perf_counter()
    task, template, device = _prepared(config, device_type)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        mesh = init_device_mesh(device.type, (world,))
        with FakeTensorMode():
            torch.manual_seed(config.train.seed)
            with device, skipped_init(), deepcopy_as_clone(), task_code(task, "build_model"):
                model = task.build_model()
            trainable = _trainable_bytes(model)  # before sharding: the whole model's
            # exactly as the fsdp2 strategy wraps it (engine.distributed.fsdp.Fsdp2.wrap): the task's shard
            # units, then the root, with the run's precision policy
            policy = precision_policy(config.runtime.precision, device.type)
            vectorize_scalars(model)
            for unit in task.shard_units(model):
                fully_shard(unit, mesh=mesh, mp_policy=policy)
            fully_shard(model, mesh=mesh, mp_policy=policy)
            optimizer = stepmod.make_optimizer(model, config)
            tracker = FSDPMemTracker(model, optimizer)

            def batch_for(step: int, indices: list) -> dict:
                batch = stepmod.empty_batch(template, len(indices), device)
                if tracker._depth:  # noqa: SLF001 - tracking has started (not the warm-up step)
                    tracker.track_inputs(tuple(v for v in batch.values() if torch.is_tensor(v)))
                return batch

            @contextmanager
            def sync(final: bool):  # as the strategy: no reduce-scatter on a step's non-final micro-batches
                model.set_requires_gradient_sync(final)
                yield

            # One step before tracking: DTensor's first call of each op propagates its sharding on fake
            # tensors the tracker cannot tell from the step's own (a cold process read the optimizer step
            # 3.5x its state too high on the toy task; a warm one matches the single-tensor AdamW it runs).
            # It also creates AdamW's state, which the tracker picks up as it starts.
            stepmod.run_steps(task, model, optimizer, config, device.type, batch_for, steps=1, fake=True, sync=sync)
            with tracker:
                # FSDPMemTracker refuses a second iteration of the root without a reset of its per-module
                # stats; the peak it keeps is global, so two one-step runs trace the two steps.
                for _ in range(2):
                    stepmod.run_steps(task, model, optimizer, config, device.type, batch_for, steps=1, fake=True,
                                      sync=sync)
                    tracker.reset_mod_stats()
            peak = tracker.get_tracker_snapshot("peak")
    finally:
        dist.destroy_process_group()
    snap = peak.get(device) or next(iter(peak.values()), {})
    result = _result(snap, FSDP_CATEGORY_KEYS, start, device, {}, trainable)
    return {**result, "batch_bytes": batch_bytes(template, config)}


def trace(config, device_type: str = "cpu") -> dict:
    """Trace two optimizer steps of ``config``'s task on a fake ``device_type``; the result dict."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from engine.budget import step as stepmod

    start = time.perf_counter()
    task, template, device = _prepared(config, device_type)
    with FakeTensorMode():
        torch.manual_seed(config.train.seed)
        # on the traced device: ``.to`` of a fake model cannot swap tensors
        with device, skipped_init(), deepcopy_as_clone(), task_code(task, "build_model"):
            model = task.build_model()
        optimizer = stepmod.make_optimizer(model, config)
        tracker = tracker_class()()
        tracker.track_external(model, optimizer)

        def batch_for(step: int, indices: list) -> dict:
            batch = stepmod.empty_batch(template, len(indices), device)
            tracker.track_external(*[v for v in batch.values() if torch.is_tensor(v)])  # category "input"
            return batch

        with tracker:
            stepmod.run_steps(task, model, optimizer, config, device.type, batch_for, fake=True)
        peak = tracker.get_tracker_snapshot("peak")
        modules = _module_activations(tracker, device)
        trainable = _trainable_bytes(model)
    snap = peak.get(device) or next(iter(peak.values()), {})
    result = _result(snap, CATEGORY_KEYS, start, device, modules, trainable)
    return {**result, "batch_bytes": batch_bytes(template, config)}


def main(argv: list[str]) -> int:
    """Entry point: read the request, trace, write the result (exit 1 with a message on failure)."""
    from engine.core.config import validate

    request_path, result_path = argv[1], argv[2]
    with open(request_path) as fh:
        request = json.load(fh)
    config = validate(request["config"], "trace request")
    if request.get("strategy") == "fsdp2":
        result = trace_fsdp(config, request.get("device", "cpu"), int(request.get("world", 1)))
    else:
        result = trace(config, request.get("device", "cpu"))
    with open(result_path, "w") as fh:
        json.dump(result, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
