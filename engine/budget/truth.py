"""Ground truth for tests and benchmarks: the real peak of the same two steps the predictors model.

Three ways, all running ``engine.budget.step.run_steps`` for real:

- ``profiler`` (CPU): every allocation and free the allocator reports to
  ``torch.profiler(profile_memory=True)``, replayed in time order; the peak of
  that running sum plus what existed before profiling started (parameters
  and buffers). Independent of MemTracker.
- ``memtracker`` (CPU or CUDA): real-mode MemTracker, tensor storages tracked
  through the dispatcher (agreed with the profiler to 200 B, research/memory.md).
- ``cuda``: ``torch.cuda.max_memory_allocated`` after a reset — the caching
  allocator's own peak (512-byte rounded blocks), context not included.
- ``dispatcher`` (CPU or CUDA): engine.budget.cpu_meter.StepPeak, every tensor
  storage an op reads or makes counted by the storage itself until it is
  freed, starting from the parameters and buffers; independent of both
  MemTracker and the profiler (the randomized accuracy test uses it, over
  three steps: the second and third run with Adam state and gradients from
  the step before).

Costs real memory and real compute: small configs only (tests use a few MiB).
"""

from __future__ import annotations

import numpy as np
import torch

from engine.budget import step as stepmod
from engine.budget.cpu_meter import held_tensors
from engine.budget.settings import with_settings
from engine.core.config import RunConfig


def unique_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors`` (tied weights and views counted once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if torch.is_tensor(t):
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def _setup(config: RunConfig, device: torch.device, steps: int = 2, ahead: int = 0):
    """Task, model and optimizer on ``device``, and a batch_for that copies pre-made samples onto it, with
    ``ahead`` more micro-batches copied before the one asked for is trained on (the data path's prefetch)."""
    from engine.core.registry import load_task_class

    task = load_task_class(config.task.name)(config)
    task.setup()
    torch.manual_seed(config.train.seed)
    with device:
        model = task.build_model()
    optimizer = stepmod.make_optimizer(model, config)
    B = config.train.batch_size
    # Data made before measuring (its generation is not part of the step); each micro-batch is then
    # copied in — a fresh allocation, as the loop's .to(device) is on a GPU (from_numpy memory on CPU
    # is not the allocator's, so the profiler would miss it).
    # Kept as numpy so that slicing them is invisible to a tracker; only the copy is an allocation.
    made = {step: {k: v.numpy() if torch.is_tensor(v) else v
                   for k, v in task.make_batch(list(range(step * B, (step + 1) * B)), step, True).items()}
            for step in range(steps + ahead)}
    order = [(step, chunk[0], chunk[-1] + 1) for step in made
             for chunk in np.array_split(np.arange(step * B, (step + 1) * B), config.train.grad_accum) if len(chunk)]
    built: dict[tuple, dict] = {}

    def copy(step: int, a: int, b: int) -> dict:
        a, b = a - step * B, b - step * B
        return {k: (torch.from_numpy(v[a:b]).to(device, copy=True) if hasattr(v, "dtype") else v)
                for k, v in made[step].items()}

    def batch_for(step: int, indices: list) -> dict:
        key = (step, indices[0], indices[-1] + 1)
        batch = built.pop(key) if key in built else copy(*key)
        at = order.index(key)
        for later in order[at + 1: at + 1 + ahead]:  # what the data path builds while this one trains
            if later not in built:
                built[later] = copy(*later)
        return batch

    return task, model, optimizer, batch_for


def profiler_peak(run) -> int:
    """Peak of the running sum of allocator events while ``run()`` executes (bytes above the start)."""
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    events = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        if node.tag == _EventType.Allocation:
            events.append((node.start_time_ns, node.extra_fields.alloc_size))
        stack.extend(node.children)
    events.sort(key=lambda e: e[0])
    current = peak = 0
    for _, size in events:
        current += size
        peak = max(peak, current)
    return peak


def peak(config: RunConfig, method: str = "profiler", device: str = "cpu", steps: int = 2, ahead: int = 0,
         **settings) -> int:
    """Real peak bytes of ``steps`` optimizer steps of ``config`` (with ``settings`` applied) by ``method``;
    ``ahead``: micro-batches the data path holds built beside the one trained on (engine.budget.ahead)."""
    config = with_settings(config, **settings)
    dev = torch.device(device)
    task, model, optimizer, batch_for = _setup(config, dev, steps, ahead)

    def run():
        stepmod.run_steps(task, model, optimizer, config, dev.type, batch_for, steps=steps)

    if method == "dispatcher":
        from engine.budget.cpu_meter import StepPeak

        with StepPeak(held_tensors(model, optimizer)) as meter:
            run()
        return meter.peak

    if method == "profiler":
        before = unique_bytes(list(model.parameters()) + list(model.buffers()))
        return before + profiler_peak(run)
    if method == "memtracker":
        from engine.budget.trace_worker import tracker_class

        tracker = tracker_class()()
        tracker.track_external(model, optimizer)
        with tracker:
            run()
        snap = tracker.get_tracker_snapshot("peak")
        return int(next(iter(snap.values()))["Total"])
    if method == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        run()
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated())
    raise ValueError(f"method={method!r}: allowed: profiler, memtracker, cuda, dispatcher")
