"""How the Trainer trains across processes: one process (``Single``), DDP (``Ddp``) or FSDP2 (engine.distributed.fsdp).

The Trainer asks the strategy five things and knows nothing else about ranks:
``rank``/``world`` (its ``SampleOrder`` shard), ``wrap(model)`` (the module the
loss runs through), ``sync(final)`` (whether this micro-batch's backward
all-reduces gradients: only the last of a step's micro-batches does, DDP's
``no_sync`` on the others), ``mean(tensor)`` (the step's logged loss, averaged
over ranks, so rank 0 logs the job's loss) and ``agree(flag)`` (a decision
that changes control flow, True on every rank if True on any).

The batch size is global: each rank reads ``batch_size // world`` samples a
step. Every rank's loss is a mean over its equal share and DDP averages the
gradients, so the update equals one process's over the whole batch up to float
summation order (the all-reduce adds the two halves' gradients; one process
sums all samples in one reduction).

A hung rank (alive but stuck: SIGSTOP'd, a deadlocked data worker) must not
leave the others waiting forever. Every collective here runs under the process
group's timeout (``runtime.collective_timeout_s``); gloo fails a send or receive
that waits longer with a RuntimeError ("Timed out waiting ...ms"), so no
watchdog thread is needed. ``collective(name)`` turns that error into a
``CollectiveTimeout`` naming the collective, the last completed step and the
rank that did not arrive (known with two ranks: the other one; gloo does not
say which peer it waited for in a larger group).
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass


class CollectiveTimeout(RuntimeError):
    """A collective waited past the process group's timeout: which one, after which step, who did not arrive."""

    def __init__(self, collective: str, step: int, missing: list[int] | None, timeout_s: float, detail: str) -> None:
        self.collective, self.step, self.missing, self.timeout_s = collective, step, missing, timeout_s
        who = f"rank {', '.join(map(str, missing))} did not arrive" if missing else "a rank did not arrive"
        super().__init__(f"collective '{collective}' timed out after {timeout_s:g} s waiting after step {step}; "
                         f"{who} (stopped or hung); the job stopped")
        self.detail = detail

    def record(self) -> dict:
        """The status.json ``hung`` record: collective, step, missing ranks, timeout."""
        return {"collective": self.collective, "step": self.step, "missing": self.missing, "timeout_s": self.timeout_s}


@dataclass
class Single:
    """One process: every method is the identity; what the engine always did."""

    rank: int = 0
    world: int = 1
    #: True when every rank writes its own part of each checkpoint (FSDP2), not rank 0 alone.
    writes_shards = False
    #: How the ranks hold the model (engine.budget.layout plans each rank's memory by it).
    strategy = "single"

    @property
    def owner(self) -> bool:
        """True on the rank that owns the run directory (events, status, control socket, checkpoints)."""
        return self.rank == 0

    def wrap(self, model, units=()):
        """The module the training forward runs through (``units``: the task's shard units, for FSDP2)."""
        return model

    def sync(self, final: bool):
        """Context for one micro-batch's forward and backward (gradient sync only when ``final``)."""
        return nullcontext()

    def mean(self, tensor):
        """``tensor`` averaged over ranks."""
        return tensor

    def collective(self, name: str):
        """Context for one named collective (a timeout becomes ``CollectiveTimeout``; here: nothing to wait on)."""
        return nullcontext()

    def mean_losses(self, total, parts: dict) -> tuple:
        """(the job's loss, its parts): this rank's averaged over ranks in one stacked all-reduce (here: as is)."""
        if self.world == 1:
            return total, parts
        import torch

        names = list(parts)
        total, *values = self.mean(torch.stack([total, *(parts[k] for k in names)]))
        return total, dict(zip(names, values))

    def agree(self, flag: bool) -> bool:
        """True on every rank if ``flag`` is True on any."""
        return bool(flag)

    def fetch(self, prefetch, key):
        """The host batch for ``key`` (the time it took counts as data wait under DDP)."""
        return prefetch.take(key)

    def broadcast(self, obj):
        """Rank 0's ``obj`` on every rank (a decision made from rank 0's numbers is then every rank's)."""
        return obj

    def gather(self, obj, name: str = "gather") -> list | None:
        """Every rank's ``obj`` on rank 0, in rank order (None elsewhere)."""
        return [obj]

    def observe(self, step: int, started: float, step_s: float, peak: int | None = None):
        """Called once a step on every rank (``peak``: its measured peak bytes, when counted); an
        ``events.RanksSampled`` on rank 0 when telemetry is due."""
        return None

    def close(self) -> None:
        """Leave the process group (nothing to leave here)."""


def env_world() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's environment; (0, 1, 0) outside torchrun."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))


class Ddp(Single):
    """DistributedDataParallel over the default process group (gloo on CPU, nccl on CUDA)."""

    strategy = "ddp"

    def __init__(self, device_type: str = "cpu", timeout_s: float = 300.0) -> None:
        """Join the process group torchrun's environment describes (MASTER_ADDR/PORT, RANK, WORLD_SIZE)."""
        import datetime

        import torch.distributed as dist

        rank, world, _ = env_world()
        super().__init__(rank, world)
        self._dist = dist
        self.backend = "nccl" if device_type == "cuda" else "gloo"
        if not dist.is_initialized():
            # The timeout bounds a collective whose peer hangs (a dead peer fails at once on gloo).
            dist.init_process_group(self.backend, timeout=datetime.timedelta(seconds=timeout_s))
        self.timeout_s = timeout_s
        self._done = 0  # the last step observe() saw: where a hang is reported
        self._peak: int | None = None  # the newest counted peak of a step on this rank (CPU)
        self._ddp = None
        from engine.distributed import telemetry

        self._telemetry = telemetry
        self._window = telemetry.Window()
        self._delay = telemetry.injected_delay(rank)
        self._data_s = 0.0
        self._ready: float | None = None  # when this step's first gradient bucket was ready to sync

    def wrap(self, model, units=()):
        """``model`` inside DDP (the raw module stays the Trainer's for state dicts and evaluation)."""
        from torch.nn.parallel import DistributedDataParallel

        ids = [model_device.index] if (model_device := next(model.parameters()).device).type == "cuda" else None
        self._ddp = DistributedDataParallel(model, device_ids=ids)
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        def timed(state, bucket):  # DDP's own all-reduce, noting when this rank's own work was done
            if self._ready is None:
                self._ready = time.perf_counter()
            return allreduce_hook(state, bucket)

        self._ddp.register_comm_hook(None, timed)
        return self._ddp

    @contextmanager
    def sync(self, final: bool):
        """DDP's ``no_sync`` on every micro-batch but a step's last: one all-reduce a step, not one a micro-batch."""
        if self._delay and final:
            time.sleep(self._delay)  # test hook (telemetry.SLOW_ENV): a rank slower at its own work
        with self.collective("gradient all-reduce") if final else nullcontext():
            with nullcontext() if final or self._ddp is None else self._ddp.no_sync():
                yield

    @contextmanager
    def collective(self, name: str):
        """Run one named collective; gloo's (or nccl's) timeout error leaves as ``CollectiveTimeout``."""
        try:
            yield
        except RuntimeError as exc:
            if isinstance(exc, CollectiveTimeout) or "timed out" not in str(exc).lower():
                raise
            missing = [1 - self.rank] if self.world == 2 else None
            raise CollectiveTimeout(name, self._done, missing, self.timeout_s, str(exc).splitlines()[0]) from exc

    def fetch(self, prefetch, key):
        """The host batch for ``key``, its wait counted as this step's data wait."""
        began = time.perf_counter()
        try:
            return prefetch.take(key)
        finally:
            self._data_s += time.perf_counter() - began

    def observe(self, step: int, started: float, step_s: float, peak: int | None = None):
        """Record the step; every ``telemetry.EVERY_STEPS`` steps gather every rank's means to rank 0.

        ``peak``: this rank's measured peak bytes of a step (the budget hook's count on CPU; None: CUDA's own
        maximum is read), so the rank table shows each rank's peak against the per-rank prediction."""
        self._done = step
        if peak is not None:
            self._peak = peak
        work = (self._ready - started) if self._ready is not None else step_s
        self._window.add(step_s, work, self._data_s)
        self._ready, self._data_s = None, 0.0
        if step % self._telemetry.EVERY_STEPS:
            return None
        return self.sample(step, "every")

    def sample(self, step: int, reason: str):
        """Gather every rank's record (a collective: every rank calls it at the same step); the event on rank 0."""
        from engine.run import events as ev

        records = self.gather(self._window.record(self.rank, step, _memory(self._peak)),
                              "telemetry gather")
        if records is None:
            return None
        slow, median, cost = self._telemetry.straggler(records)
        return ev.RanksSampled(step=step, ranks=records, straggler=slow, median_work_s=median, cost_s=cost,
                               reason=reason)

    def mean(self, tensor):
        """All-reduced average (one small collective a step: the logged loss and its parts, stacked)."""
        out = tensor.detach().clone()
        with self.collective("loss all-reduce"):
            self._dist.all_reduce(out, op=self._dist.ReduceOp.SUM)
        return out / self.world

    def agree(self, flag: bool) -> bool:
        """MAX all-reduce of one flag: any rank's True is every rank's, so no rank waits alone in a collective."""
        import torch

        value = torch.tensor([1 if flag else 0], dtype=torch.int32)
        if self.backend == "nccl":
            value = value.cuda()
        with self.collective("flag agreement"):
            self._dist.all_reduce(value, op=self._dist.ReduceOp.MAX)
        return bool(value.item())

    def gather(self, obj, name: str = "gather") -> list | None:
        """Every rank's ``obj`` on rank 0 (None elsewhere); a pickle over the group, for small records."""
        out = [None] * self.world if self.rank == 0 else None
        with self.collective(name):
            self._dist.gather_object(obj, out, dst=0)
        return out

    def broadcast(self, obj):
        """Rank 0's ``obj`` on every rank."""
        box = [obj]
        with self.collective("broadcast"):
            self._dist.broadcast_object_list(box, src=0)
        return box[0]

    def close(self) -> None:
        """Leave the process group (a clean exit; a crashed peer leaves this to the process's end)."""
        if self._dist.is_initialized():
            self._dist.destroy_process_group()


def _memory(peak: int | None = None) -> dict:
    """This process's memory: its peak (CUDA's maximum allocated, else ``peak``: a counted CPU step), device
    allocated/reserved (CUDA) and resident set size (bytes)."""
    import torch

    out = {"peak": peak, "allocated": None, "reserved": None, "rss": None}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["allocated"], out["reserved"] = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        out["peak"] = torch.cuda.max_memory_allocated()
    import psutil

    try:
        out["rss"] = int(psutil.Process().memory_info().rss)
    except psutil.Error:
        pass
    return out
