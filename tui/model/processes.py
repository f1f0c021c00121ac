"""The processes of a run, as nvitop shows them: the engine and its data workers, or a job's supervisor and
each rank, with CPU %, resident memory, GPU memory and state.

Read from psutil on the viewer's machine (``attach`` runs where the engine
does: its control socket is a Unix socket), starting at the engine's pid: a
distributed job's rank 0 sits under torchrun and the job's supervisor, so the
tree is walked up to the supervisor first and listed down from there. GPU
memory per process comes from NVML (engine.budget.nvml, optional: "–" without it).
``ProcessTable`` keeps its psutil objects between reads, because CPU % is
measured between two of them. Torch-free, Textual-free.
"""

from __future__ import annotations

from dataclasses import dataclass

import psutil

from engine.budget.nvml import memory_by_pid

#: Command-line marks of a job's own processes, and the role each names.
_ROLES = (("engine.app.supervisor", "supervisor"), ("torch.distributed.run", "torchrun"),
          ("torchrun", "torchrun"), ("engine.app.rank_worker", "rank"), ("engine.budget.trace_worker", "trace"),
          ("multiprocessing.resource_tracker", "resource tracker"), ("multiprocessing.spawn", "data worker"),
          ("-m engine", "engine"))


_KNOWN = {role for _, role in _ROLES}


@dataclass(frozen=True)
class ProcRow:
    """One process: its role, pid, CPU % (None on the first read), RSS and GPU memory (bytes), state."""

    role: str
    pid: int
    cpu_percent: float | None
    rss: int | None
    gpu_memory: int | None
    state: str
    depth: int


def role_of(cmdline: list[str], environ: dict | None = None) -> str:
    """What a process is to the run, from its command line (a rank's number from torchrun's environment)."""
    text = " ".join(cmdline)
    for mark, role in _ROLES:
        if mark in text:
            if role == "rank" and environ and "RANK" in environ:
                return f"rank {environ['RANK']}"
            return role
    return cmdline[0].rsplit("/", 1)[-1] if cmdline else "?"


class ProcessTable:
    """The process tree of one run, read again on each ``rows()`` (CPU % is measured between reads)."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self._procs: dict[int, psutil.Process] = {}

    def root(self) -> psutil.Process | None:
        """The top of the run's tree: the engine, or the supervisor above a distributed job's ranks."""
        if self.pid is None:
            return None
        try:
            proc = psutil.Process(self.pid)
            while True:
                parent = proc.parent()
                if parent is None or role_of(_cmdline(parent)) not in ("supervisor", "torchrun", "rank"):
                    return proc
                proc = parent
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None

    def rows(self) -> list[ProcRow]:
        """Every process of the run, parents before children; [] when the engine is not visible from here."""
        root = self.root()
        if root is None:
            return []
        gpu = memory_by_pid()
        out = []
        for proc, depth in _walk(root):
            known = self._procs.setdefault(proc.pid, proc)
            try:
                with known.oneshot():
                    role = role_of(_cmdline(known), _environ(known))
                    if known.pid == self.pid and role not in _KNOWN:
                        role = "engine"  # the in-process dashboard's own process
                    out.append(ProcRow(role=role, pid=known.pid,
                                       cpu_percent=known.cpu_percent(None), rss=known.memory_info().rss,
                                       gpu_memory=gpu.get(known.pid), state=known.status(), depth=depth))
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        alive = {row.pid for row in out}
        self._procs = {pid: p for pid, p in self._procs.items() if pid in alive}
        return out


def _walk(root: psutil.Process, depth: int = 0):
    yield root, depth
    try:
        children = sorted(root.children(), key=lambda p: p.pid)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return
    for child in children:
        yield from _walk(child, depth + 1)


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []


def _environ(proc: psutil.Process) -> dict | None:
    try:
        return proc.environ()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return None
