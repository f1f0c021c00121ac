"""The ranks of a job that someone else's framework launched: who is rank 0, and the two collectives the cockpit
needs at a step boundary.

``broadcast`` carries rank 0's decision (pause, checkpoint, stop) to every
rank; ``gather`` brings every rank's record (its step, host, memory) to rank
0 when a control lands, for a ``ranks`` event: the log then shows the control
landing on every rank at one step, as the engine's own jobs do
(engine.distributed.controls). Lightning hands its strategy's broadcast; a
job under torchrun or accelerate uses torch.distributed's object collectives.
One process: both are the identity.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any, Callable

from engine.run import events as ev


def _same(obj: Any) -> Any:
    return obj


def _alone(obj: Any) -> list:
    return [obj]


@dataclass(frozen=True)
class Group:
    """This process's place in the job and the job's collectives (every rank calls them at the same point)."""

    rank: int = 0
    world: int = 1
    #: rank 0's object on every rank.
    broadcast: Callable[[Any], Any] = _same
    #: every rank's object, in rank order (on every rank).
    gather: Callable[[Any], list] = _alone


def torch_group() -> Group:
    """The job torch.distributed runs (torchrun, accelerate, Lightning's DDP), else one process."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return Group()

    def broadcast(obj: Any) -> Any:
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(obj: Any) -> list:
        out: list = [None] * dist.get_world_size()
        dist.all_gather_object(out, obj)
        return out

    return Group(dist.get_rank(), dist.get_world_size(), broadcast, gather)


def record(rank: int, step: int, step_s: float | None = None) -> dict:
    """This rank's line of a ranks event: its step, host and process memory (RanksSampled's fields)."""
    from engine.budget.cpu_meter import rss

    return {"rank": rank, "host": socket.gethostname(), "pid": os.getpid(), "step": step, "step_s": step_s,
            "work_s": None, "data_s": None, "allocated": None, "reserved": None, "rss": rss()}


def landed(records: list[dict], step: int) -> ev.RanksSampled:
    """The ranks event of a control that landed at ``step`` on every rank in ``records``."""
    return ev.RanksSampled(step=step, ranks=list(records), reason="control")
