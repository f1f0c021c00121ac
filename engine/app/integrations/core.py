"""The run-directory contract written from a loop the engine does not own, and its controls at step boundaries.

A Lightning callback, a transformers callback and the plain-loop context
manager each translate their framework's moments (a step ended, a validation
ended, a checkpoint was written) into calls on one ``Cockpit``. It writes
exactly what the engine writes, through the same pieces (engine.run):
``engine.lock`` first (RunLock), ``config.toml``, ``events.jsonl``
(JsonlSink), ``status.json`` with its heartbeat (StatusWriter), and serves
``control.sock`` (ControlServer over a Controls mailbox). So ``runs``,
``plot``, ``attach``, compare and the dashboard work unchanged.

Rank 0 owns the run directory; every other rank has a Cockpit with no
directory, which only takes part in the agreement at each boundary.

Controls land only at ``boundary(step, save)``, which every rank calls at the
same step. Rank 0 drains its mailbox and answers each request; the decision
(paused?, checkpoints asked for, stop?) travels to every rank through the
framework's own ``broadcast`` (Lightning's strategy, torch.distributed), so
all ranks block, save or stop at one step. A pause is a loop of short
boundaries (one broadcast every ``PAUSE_POLL_S``), never one long collective
that a process group's timeout would kill. Changing settings is refused with
``settings_locked``: the framework owns its batch size and learning rate.
"""

from __future__ import annotations

import logging
import math
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from engine.app.integrations import ownership, ranks
from engine.app.integrations.numbers import Numbers
from engine.app.integrations.ranks import Group
from engine.core.taskspec import Capabilities, Metric
from engine.run import events as ev
from engine.run.control.requests import Controls, Request
from engine.run.rundir import RunDir, RunDirError, default_name

#: Seconds between looks at the mailbox while paused (each look is one broadcast on a multi-rank job).
PAUSE_POLL_S = 0.25
#: Least seconds between two step events when the user sets no cadence: every step of a run slower than 50
#: steps/s, every few of a faster one (50 points a second is more than a curve shows). A step event costs
#: ~80 µs in a Lightning run (its metrics dict, the loss read: a device sync on a GPU, the event).
STEP_EVENT_S = 0.02
#: The tune modal's answer for every live setting: what the integration cannot do, and what to do instead.
SETTINGS_LOCKED = ("{framework} owns this run's batch size, learning rate and every other setting: the cockpit "
                   "cannot change them mid-run (change them in your script and restart it)")


class CockpitError(Exception):
    """The run directory cannot be used (held by another run, not writable); one line naming it."""


@dataclass(frozen=True)
class Decision:
    """What every rank does after a boundary: save for these checkpoint requests, then maybe stop."""

    checkpoints: tuple[str, ...] = ()
    #: None, "graceful" (save, then stop) or "now" (stop without a save).
    stop: str | None = None
    #: Still paused: only a boundary that lets the framework save first (``save_later``) returns paused.
    paused: bool = False


#: The decision of a boundary where nothing was asked.
NOTHING = Decision()


def resume_command() -> str:
    """How this run continues: the user's own command line, from the directory it ran in."""
    return f"cd {shlex.quote(os.getcwd())} && {shlex.join([sys.executable, *sys.argv])}"


class Cockpit:
    """See the module docstring. ``framework`` names the run's owner (its task name in the events)."""

    def __init__(self, run_dir: str | Path | None, framework: str, *, group: Group | None = None,
                 primary: Metric | None = None, label: str = "") -> None:
        """``group``: the job's ranks and collectives (engine.app.integrations.ranks; None: one process). Every
        rank makes its Cockpit at the same point of the run: the directory's name is agreed here."""
        self.framework, self.label = framework, label or framework
        self.group = group or Group()
        self.rank = self.group.rank
        # rank 0's choice on every rank (the default name is rank 0's clock): a collective, like every boundary
        self.run_dir = RunDir(Path(self.group.broadcast(str(run_dir or Path("runs") / default_name()))))
        self.primary = primary or Metric("val_loss", "val loss", higher_is_better=False)
        self.controls = Controls()
        self.state = "starting"
        self.step = 0
        self.total_steps = 0  # set by started(); 0 when the run does not say
        self.best: float | None = None
        self.last_checkpoint: str | None = None
        self.bus = self.status = self.server = self.lock = self.system = None
        self._rate: tuple[float, int] | None = None  # (time, step) of the previous logged step
        self._paused = False  # what the last boundary agreed
        self._logged_at = float("-inf")  # time.monotonic() of the last step event
        #: Reads the user's values; an unreadable one is dropped and said once (engine.app.integrations.numbers).
        self.numbers = Numbers(self.warn)

    @property
    def owner(self) -> bool:
        """True on the rank that writes the run directory."""
        return self.rank == 0

    # ------------------------------------------------------------------ opening
    def open(self, config: dict | None = None, prepare: Callable[[], None] | None = None) -> "Cockpit":
        """Rank 0: lock and create the directory, write config.toml (a fresh run), start the log, heartbeat and
        control socket. CockpitError (one line), with nothing written, for a directory another live run holds,
        one holding another kind of run (``ownership.foreign``: an engine run, another framework's), or when
        ``prepare`` (called first, before anything is written: the plain loop reads its saved state there)
        raises CockpitError."""
        if not self.owner:
            return self
        from engine.run.control.channel import ControlServer
        from engine.run.control.wire import ChannelError
        from engine.run.offthread import run_records
        from engine.run.runlock import RunLock
        from engine.run.sinks import EventBus, JsonlSink

        try:
            # read-only first, so a refusal leaves the directory exactly as it was (files are replaced by atomic
            # renames, so what is read is whole even if a live run holds the lock: the lock then refuses)
            problem = ownership.foreign(self.run_dir, self.framework)
            if problem:
                raise RunDirError(problem)
            if prepare is not None:
                prepare()
            self.lock = RunLock.acquire(self.run_dir)
            fresh = not self.run_dir.events.exists()
            self.run_dir.create()
            if fresh:
                _write_config(self.run_dir.config, self.describe(config))
            self.bus = EventBus()
            jsonl = JsonlSink(self.run_dir.events, warn=lambda text: self.emit(ev.Warning(text=text)))
            # encoded and written on a drainer thread, as the engine's (engine.run.offthread): the user's step
            # pays for a queue append
            self.status, records = run_records(self.run_dir, jsonl)
            self.bus.add(records)
            self.status.update(resume_command=resume_command())
            self.status.start()
            self.server = ControlServer(self.run_dir, self.controls, self.bus).start()
        except (RunDirError, ChannelError, CockpitError, OSError) as exc:
            self._close_quietly()
            raise CockpitError(str(exc) if not isinstance(exc, OSError) else
                               f"{self.run_dir.root}: cannot write the run directory ({exc.strerror})") from None
        from engine.training.system import SystemSampler

        self.system = SystemSampler(self.emit).start()
        return self

    def describe(self, config: dict | None) -> dict:
        """The run's config.toml and RunStarted.config: who trains it, how to rerun it, the user's own settings."""
        out = {"integration": {"framework": self.framework, "command": resume_command()}}
        for key, value in (config or {}).items():
            out.setdefault(key, value)
        return out

    def capabilities(self) -> Capabilities:
        """What viewers may do with this run: its primary metric, and no live settings (with why)."""
        return Capabilities(primary=self.primary, memory="traced",
                            settings_locked=SETTINGS_LOCKED.format(framework=self.label))

    # ------------------------------------------------------------------ events (rank 0)
    def emit(self, event: ev.Event) -> None:
        """Deliver an event to the log and the viewers (nothing on other ranks)."""
        if self.bus is not None:
            self.bus.emit(event)

    def warn(self, text: str) -> None:
        """One line for the user: in their terminal (logging, ``sensorlm_tui``) and in the run's log."""
        logging.getLogger("sensorlm_tui").warning(text)
        self.emit(ev.Warning(text=text, step=self.step))

    def set_state(self, state: str, reason: str = "") -> None:
        """Change the run state (one StateChanged when it really changes)."""
        if state != self.state:
            self.state = state
            self.emit(ev.StateChanged(state=state, reason=reason, step=self.step))

    def started(self, **fields) -> None:
        """RunStarted (``fields``: its total_steps, params, device, budget, start_step, resumed_from, config)."""
        self.step = fields.get("start_step", 0)
        self.total_steps = int(fields.get("total_steps") or 0)
        self.emit(ev.RunStarted(name=self.run_dir.name, task=self.framework, capabilities=self.capabilities().to_dict(),
                                pid=os.getpid(), **fields))
        budget = fields.get("budget")
        if budget is not None and budget.source == "measured":  # the memory panel says "measured only"; here is why
            self.emit(ev.Warning(text=f"memory: {budget.note}", step=self.step))
        self.set_state("running", f"training in {self.label}")
        self._rate = (time.time(), self.step)

    def due(self, step: int, every: int | None = None) -> bool:
        """Should ``step`` be logged: every ``every``-th step, else at most one step per ``STEP_EVENT_S``; and
        always when a control is waiting, so it lands on a logged step, and at the run's last step (the final
        loss is the one a reader looks for; at a fast pace the time cadence would skip it)."""
        if not self.owner:
            return False
        if self.controls.waiting() or (self.total_steps and step >= self.total_steps):
            return True
        if every:
            return step % every == 0
        return time.monotonic() - self._logged_at >= STEP_EVENT_S

    def logged(self, step: int, loss: Any, components: dict | None = None, **fields) -> None:
        """StepLogged for ``step``: ``loss`` and ``components`` as the user gave them (read here: what is not a
        number is dropped, said once), ``fields`` its lr, epoch, grad_norm, batch_size; the pace is the wall time
        since the previous logged step."""
        self.step = step
        loss = self.numbers.loss(loss)
        components = self.numbers.read_all(components or {})
        for name in ("lr", "grad_norm"):  # the framework's own numbers, or a user's optimizer's tensor lr
            if name in fields:
                number = self.numbers.read(name, fields[name])
                fields[name] = number if number is not None else (0.0 if name == "lr" else math.nan)
        self._logged_at = time.monotonic()
        now = time.time()
        rate = 0.0
        if self._rate is not None and step > self._rate[1] and now > self._rate[0]:
            rate = (step - self._rate[1]) / (now - self._rate[0])
        self._rate = (now, step)
        batch = fields.get("batch_size") or 0
        self.emit(ev.StepLogged(step=step, loss=loss, steps_per_s=rate, samples_per_s=rate * batch, t=now,
                                components=components, **fields))

    def evaluated(self, step: int, metrics: dict[str, Any], seconds: float = 0.0) -> ev.EvalDone | None:
        """EvalDone of a validation pass's numbers (what is not a number is dropped, said once), with the best of
        the primary metric so far. A NaN is never the best: it compares false with everything, so a first eval
        of NaN would stay "best" for the rest of the run (and status.json would hold a bare NaN)."""
        values = self.numbers.read_all(metrics)
        if not values:
            return None
        name = self.primary.name if self.primary.name in values else next(iter(values))
        value, better = values[name], self.primary.higher_is_better
        is_best = not math.isnan(value) and (self.best is None or (value > self.best if better else value < self.best))
        if is_best:
            self.best = value
        event = ev.EvalDone(step=step, val_loss=values.get("val_loss", float("nan")), metrics=values, primary=name,
                            best=self.best, is_best=is_best, seconds=seconds)
        self.emit(event)
        return event

    def saved(self, step: int, path: str | Path, kind: str, request_ids: list[str] = (), seconds: float = 0.0) -> None:
        """A checkpoint the framework wrote (its own file, named by its absolute path: the run may be viewed from
        another directory), how long the write took; CheckpointSaved, and the acks of requests it answers."""
        path = str(Path(path).absolute())
        self.last_checkpoint = path
        try:
            size = _size(Path(path))
        except OSError:
            size = 0
        ids = list(request_ids)
        self.emit(ev.CheckpointSaved(step=step, path=path, kind=kind, bytes=size, seconds=max(0.0, seconds),
                                     request_id=ids[0] if ids else None))
        for rid in ids:
            self.emit(ev.SettingChanged(name="checkpoint", old=None, new=path, step=step, request_id=rid))

    def already_saved(self, step: int, path: str, request_ids: list[str]) -> None:
        """Checkpoint requests answered by a checkpoint already on disk that holds this very state (asked for
        while paused right after a save: nothing has trained since)."""
        for rid in request_ids:
            self.emit(ev.SettingChanged(name="checkpoint", old=None, new=path, step=step, request_id=rid,
                                        reason="paused since this checkpoint was written: it holds this step"))

    def save_failed(self, step: int, error: str, request_ids: list[str] = ()) -> None:
        """A save the framework could not make: CheckpointFailed, and a refusal for each request it answers."""
        self.emit(ev.CheckpointFailed(step=step, error=error))
        for rid in request_ids:
            self.emit(ev.Refused(request={"action": "checkpoint_now"}, why=f"checkpoint failed: {error}", step=step,
                                 request_id=rid))

    # ------------------------------------------------------------------ controls (every rank)
    def boundary(self, step: int, save: Callable[[list[str]], None], save_later: bool = False) -> Decision:
        """Apply controls at ``step`` on every rank alike (module docstring); blocks while paused.

        ``save(request_ids)`` writes a checkpoint with the framework's own save (called on every rank, even
        while paused) and answers those requests through ``saved`` / ``save_failed``. ``save_later``: the
        framework saves only after this returns (the transformers Trainer, after its step-end hook), so a save
        asked for while paused returns at once with ``paused`` set, and the caller pauses again after it.
        """
        self.step = step
        if self.status is not None:
            self.status.set_step(step)  # every step, logged or not: `runs` and a pause show the exact one
        if self.group.world == 1 and not self._paused and not self.controls.waiting():
            return NOTHING  # one process, nothing asked: the common step costs two attribute reads
        while True:
            decision = self.group.broadcast(self._decide() if self.owner else None)
            if self.group.world > 1 and (decision["checkpoints"] or decision["stop"]
                                         or decision["paused"] != self._paused):
                self._landed(step)  # a control lands here: every rank's step, gathered, in the log
            self._paused = decision["paused"]
            if decision["checkpoints"]:
                save(list(decision["checkpoints"]))
            if decision["stop"] or not decision["paused"] or (save_later and decision["checkpoints"]):
                return Decision(tuple(decision["checkpoints"]), decision["stop"], decision["paused"])
            if self.owner:
                self.controls.wait(PAUSE_POLL_S)

    def _landed(self, step: int) -> None:
        """Every rank's record where a control landed (a gather: every rank calls it at the same boundary)."""
        records = self.group.gather(ranks.record(self.rank, step))
        if self.owner:
            self.emit(ranks.landed(records, step))

    def _decide(self) -> dict:
        """Rank 0: answer every queued request; the decision every rank follows."""
        checkpoints = []
        for request in self.controls.drain():
            if request.action == "checkpoint_now":
                checkpoints.append(request.id)  # answered by `saved` once the framework has written it
            else:
                self._answer(request)
        stop = "now" if self.controls.stop_event.is_set() else \
            "graceful" if self.controls.graceful_event.is_set() else None
        return {"paused": self.state == "paused", "checkpoints": checkpoints, "stop": stop}

    def _answer(self, request: Request) -> None:
        action, step = request.action, self.step
        if action == "pause" and self.state != "paused":
            self.set_state("paused", "paused by request")
            return self._ack(request, "state", "running", "paused")
        if action == "resume" and self.state == "paused":
            self.set_state("running", "resumed by request")
            return self._ack(request, "state", "paused", "running")
        if action == "abort":  # Controls.submit set the stop; every rank acts on it after this boundary
            return self._ack(request, "state", self.state, "aborting", f"abort ({request.mode}) by request")
        why = {"pause": "already paused", "resume": "not paused",
               "free_memory": f"{self.label} owns its device memory: nothing for the cockpit to free"}.get(action)
        why = why or SETTINGS_LOCKED.format(framework=self.label)
        if action == "set" and request.dry_run:
            return self.emit(ev.Prediction(name=request.name or "", value=request.value, fits=False, refused=why,
                                           step=step, request_id=request.id))
        self.emit(ev.Refused(request=request.to_dict(), why=why, step=step, request_id=request.id))

    def _ack(self, request: Request, name: str, old: Any, new: Any, reason: str = "") -> None:
        self.emit(ev.SettingChanged(name=name, old=old, new=new, reason=reason, step=self.step,
                                    request_id=request.id))

    # ------------------------------------------------------------------ the end
    def finish(self, status: str, reason: str = "", exit_code: int = 0, checkpoint: str | None = None) -> None:
        """RunFinished, the final state, and the run directory handed back (socket, heartbeat, lock)."""
        if self.bus is None:
            return
        final = {"finished": "finished", "aborted": "aborted", "interrupted": "aborted"}.get(status, "failed")
        self.set_state(final, reason)
        command = resume_command() if status != "finished" else None
        self.emit(ev.RunFinished(status=status, best=self.best, steps=self.step, reason=reason,
                                 checkpoint=checkpoint or self.last_checkpoint, resume_command=command,
                                 exit_code=int(exit_code)))
        self._close_quietly(state=final, exit_code=int(exit_code))

    def _close_quietly(self, **final) -> None:
        for part in (self.system, self.server):
            if part is not None:
                part.stop()
        if self.status is not None:
            self.status.stop(step=self.step, **final)
        if self.bus is not None:
            self.bus.close()
        if self.lock is not None:
            self.lock.release()
        self.bus = self.status = self.server = self.lock = self.system = None


def _size(path: Path) -> int:
    """Bytes of a checkpoint file, or of every file in a checkpoint directory (transformers writes directories)."""
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def _write_config(path: Path, config: dict) -> None:
    """config.toml of the run (values TOML cannot hold are written as their text)."""
    import tomli_w

    from engine.run.rundir import atomic_write_text

    def plain(value):
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items() if v is not None}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value if v is not None]
        return value if isinstance(value, (str, int, float, bool)) else str(value)

    atomic_write_text(path, tomli_w.dumps(plain(config)))
