"""What is in a runs directory: one cheap summary per run, and resolving `attach`'s RUN argument.

A summary comes from status.json (rewritten every second by the engine: pid,
heartbeat, state, step, best primary metric, last checkpoint) plus the tail of
events.jsonl (tui/model/log_tail.py) for what status.json may lag on or lack: the
last checkpoint's step, the best metric of an older run, the last autotune. The
exact last step of a SIGKILLed engine (status.json is up to a second behind, and
the log has step lines only at a cadence) is the step record's newest row (its
step file's header and last value). Constant cost per run whatever the log's
length. Torch-free, textual-free.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.core.fmt import printable
from engine.core.invocation import command
from engine.core.taskspec import Capabilities
from engine.run.rundir import RunDir, probe, resume_command
from tui.model.log_tail import first_event, last_events

#: Files whose presence makes a directory a run (an engine writes config.toml first, then the others).
RUN_MARKERS = ("events.jsonl", "status.json", "config.toml")
#: What `runs` and `attach` look in when given nothing.
DEFAULT_ROOT = Path("runs")

_TAIL_TYPES = {"step", "eval", "checkpoint", "run_started", "run_finished", "state", "autotune_chose"}


class RunLookupError(Exception):
    """A RUN argument that names no usable run; the message is the one line to print."""


@dataclass
class RunSummary:
    """One run as `runs` lists it; ``to_json`` is the --json record."""

    name: str
    path: str
    state: str                    # liveness: live / stalled / finished / aborted / failed / crashed / stale / unknown
    run_state: str | None         # the engine's own state (running, paused, checkpointing, …)
    step: int | None
    total_steps: int | None
    best: float | None            # best value of the task's primary metric so far
    best_metric: str | None       # its name, with its unit when the run declared one ("accuracy %")
    last_checkpoint: str | None   # path
    last_checkpoint_step: int | None
    started: float | None         # seconds since the epoch
    updated: float | None         # newest heartbeat or log write
    pid: int | None
    host: str | None
    exit_code: int | None
    resume_command: str
    #: The last autotune in the log's tail: status, settings, rate, start_rate, step (None: none seen).
    autotune: dict | None = None
    #: How the run's last engine ended by its own account (RunFinished.status: finished, aborted, interrupted,
    #: failed), None while running or when its log never said.
    finished_as: str | None = None
    #: A stalled engine's process state (psutil's: stopped, disk-sleep, running…) and seconds since its last
    #: heartbeat; None for any other state.
    process_state: str | None = None
    silent_s: float | None = None

    def to_json(self) -> dict:
        """Plain JSON-ready dict (field names as above)."""
        return asdict(self)

    def age_s(self, now: float | None = None) -> float | None:
        """Seconds since the run started (None when unknown)."""
        if self.started is None:
            return None
        return (time.time() if now is None else now) - self.started


def is_run_dir(path: Path) -> bool:
    """True when ``path`` is a directory holding any of RUN_MARKERS."""
    return path.is_dir() and any((path / marker).exists() for marker in RUN_MARKERS)


def summarize(root: Path) -> RunSummary:
    """The summary of one run directory (never raises for a half-written or damaged run)."""
    run = RunDir(Path(root))
    status = run.read_status() or {}
    tail = last_events(run.events, _TAIL_TYPES)
    started_event = tail.get("run_started") or first_event(run.events, "run_started")

    step = status.get("step")
    said = [getattr(tail.get(kind), "steps" if kind == "run_finished" else "step", None)
            for kind in ("step", "eval", "checkpoint", "state", "run_finished")]
    for seen in [_recorded_step(run.root), *said]:
        if isinstance(seen, int) and (step is None or seen > step):
            step = seen
    total = status.get("total_steps") or getattr(started_event, "total_steps", None) or None

    best, metric = status.get("best"), status.get("best_metric")
    if best is None:
        evald = tail.get("eval")
        if evald is not None and evald.best is not None:
            best, metric = evald.best, evald.primary
    if metric and started_event is not None:
        primary = Capabilities.from_dict(started_event.capabilities).primary
        if primary.name == metric and primary.unit:
            metric = f"{metric} {primary.unit}"
    ckpt = tail.get("checkpoint")
    ckpt_path = status.get("last_checkpoint") or (ckpt.path if ckpt else None)
    if ckpt_path is None and tail.get("run_finished") is not None:
        ckpt_path = tail["run_finished"].checkpoint
    ckpt_step = ckpt.step if ckpt is not None and (ckpt_path is None or ckpt.path == ckpt_path) else None

    started = status.get("started") or getattr(started_event, "t", None)
    updated = max([t for t in (status.get("heartbeat"), _mtime(run.events)) if t is not None], default=None)
    pid = status.get("pid")
    alive = probe(run)
    return RunSummary(
        name=run.name, path=str(run.root), state=alive.state, run_state=status.get("state"),
        step=step, total_steps=total, best=best, best_metric=metric, last_checkpoint=ckpt_path,
        last_checkpoint_step=ckpt_step, started=started, updated=updated,
        pid=pid if isinstance(pid, int) else None, host=status.get("host"), exit_code=status.get("exit_code"),
        resume_command=status.get("resume_command") or resume_command(run), autotune=_autotune(tail),
        finished_as=getattr(tail.get("run_finished"), "status", None), process_state=alive.process,
        silent_s=alive.silent_s() if alive.state == "stalled" else None)


def _recorded_step(root: Path) -> int | None:
    """The newest step in the run's step record (its commit: every step is there, where the log has step lines
    only at a cadence and status.json a step as of its last write); None without a readable record."""
    from tui.model.step_open import newest_step

    try:
        return newest_step(root)
    except OSError:  # an unreadable record: the log's and status.json's steps stand
        return None


def _autotune(tail: dict) -> dict | None:
    chose = tail.get("autotune_chose")
    if chose is None:
        return None
    return {"status": chose.status, "settings": chose.settings, "rate": chose.rate, "start_rate": chose.start_rate,
            "step": chose.step}


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def list_runs(root: Path) -> list[RunSummary]:
    """Every run directly under ``root``, newest first (by start time, then name)."""
    runs = [summarize(child) for child in sorted(Path(root).iterdir()) if is_run_dir(child)]
    runs.sort(key=lambda r: (r.started or 0.0, r.name), reverse=True)
    return runs


def _listing(runs: list[RunSummary]) -> str:
    shown = ", ".join(f"{printable(r.name)} ({r.state})" for r in runs[:8])
    more = f", … {len(runs) - 8} more" if len(runs) > 8 else ""
    return shown + more


def resolve(arg: str | None, root: Path = DEFAULT_ROOT) -> Path:
    """The run directory `attach [RUN]` means: a path, a name under ``root``, or the newest live run.

    Raises RunLookupError with a one-line message listing what exists.
    """
    if arg is None:
        if not root.is_dir():
            raise RunLookupError(f"attach: no run given and no {root}/ directory here; "
                                 f"give a run directory, e.g. `{command('attach')} runs/<name>`")
        runs = list_runs(root)
        live = [r for r in runs if r.state in ("live", "stalled")]  # a stalled engine is still there
        if live:
            return Path(live[0].path)
        if not runs:
            raise RunLookupError(f"attach: no runs under {root}/; start one with `{command('train')}`")
        raise RunLookupError(f"attach: no live run under {root}/ (runs there: {_listing(runs)}); "
                             f"give one by name to view it")
    path = Path(arg)
    if is_run_dir(path):
        return path
    if "/" not in arg and is_run_dir(root / arg):
        return root / arg
    if path.is_dir():
        raise RunLookupError(f"attach {printable(arg)}: not a run directory (no events.jsonl, status.json or "
                             "config.toml)")
    known = list_runs(root) if root.is_dir() else []
    hint = f"runs under {root}/: {_listing(known)}" if known else f"no runs under {root}/"
    raise RunLookupError(f"attach {printable(arg)}: no such run ({hint})")
