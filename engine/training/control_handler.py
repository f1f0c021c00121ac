"""The engine side of the control channel: applies viewers' requests at step boundaries, owns the run state.

Every request is answered with an event carrying its id: ``SettingChanged``
(applied), ``Refused`` (with why, and for a budget refusal the predicted and
budget bytes), or ``Prediction`` (a dry-run ``set``: the numbers the same real
request would be judged by, nothing applied). A forced change says so in its
acknowledgement, so the run's log shows what was pushed past the budget.

While paused the handler waits on every stop reason, not only abort-now:
SIGTERM, a first Ctrl-C, SIGHUP with ``on_hangup = stop`` and a graceful abort
all set ``Controls.graceful_event``, which ends the pause; the loop then
checkpoints at the paused step and stops (``GracefulStop``).

It is handed what it changes and asks (the live settings, the budget that
judges a change, the batch source that follows one, the device) and, of the run,
only its step, ``settle`` and ``save_now``. An action another component owns
(``autotune``) is routed to it (``route``): the handler does not know it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

from engine.core.exit_codes import ExitCode
from engine.optim.device import release_cache
from engine.run import events as ev
from engine.run.control.requests import Controls, Request

if TYPE_CHECKING:
    import torch

    from engine.budget.hook import BudgetHook
    from engine.training.live_settings import LiveSettings

#: Seconds between looks at the mailbox while paused (a request or a stop wakes it at once).
PAUSE_POLL_S = 0.25


class Stop(Exception):
    """Leave the loop now, without a checkpoint (abort-now, second SIGINT)."""


class GracefulStop(Exception):
    """Leave the loop with a checkpoint (unless ``checkpoint`` is False) and this exit code."""

    def __init__(self, reason: str, exit_code: int, checkpoint: bool = True, status: str = "aborted") -> None:
        super().__init__(reason)
        self.reason, self.exit_code, self.checkpoint, self.status = reason, exit_code, checkpoint, status


class Steerable(Protocol):
    """What the handler asks of the run it steers (the Trainer)."""

    #: The last step done (every event the handler emits carries it).
    step: int

    def save_now(self, request_id: str | None) -> str | None:
        """Write ``last`` now, and the task's export beside it; its path, None if the write failed."""

    def settle(self) -> None:
        """Read back, count and log every step dispatched so far (the deferred readback's last one)."""


class BatchSource(Protocol):
    """How the batch source follows a live change (engine.training.batch_source.PlannedPrefetcher)."""

    def override(self, threads: int | None = None, data_workers: int | None = None) -> None:
        """Threads or data workers set by hand: the plan keeps them."""

    def task_changed(self) -> None:
        """A task setting that shapes batches changed: worker processes restart from the task as it is now."""


class ControlHandler:
    """Drains ``controls`` at each boundary, answers every request on ``emit``, and raises the run's stops."""

    def __init__(self, controls: Controls, emit: Callable[[ev.Event], None], run: Steerable,
                 settings: LiveSettings, budget: BudgetHook, prefetch: BatchSource, device: torch.device) -> None:
        """``settings`` checks and applies a ``set``; ``budget`` judges one that moves memory (``predict_change``);
        ``prefetch`` (the batch source) follows a change of threads, data workers or the task's data; ``device``:
        ``free_memory`` acts only on CUDA."""
        self.controls = controls
        self.emit = emit
        self.run = run
        self.settings, self.budget, self.prefetch, self.device = settings, budget, prefetch, device
        #: Actions another component answers (``route``), by name.
        self.routes: dict[str, Callable[[Request], None]] = {}
        #: starting, running, paused, checkpointing, then finished / aborted / failed.
        self.state = "starting"

    def route(self, action: str, answer: Callable[[Request], None]) -> None:
        """Hand every request of ``action`` to ``answer`` (it acknowledges or refuses it itself)."""
        self.routes[action] = answer

    def set_state(self, state: str, reason: str = "") -> None:
        """Change the run state (one StateChanged event when it really changes)."""
        if state != self.state:
            self.state = state
            self.emit(ev.StateChanged(state=state, reason=reason, step=self.run.step))

    def stopping(self) -> bool:
        """True once any stop was asked for (a long evaluation checks this between batches)."""
        return self.controls.stopping()

    def boundary(self) -> None:
        """Apply queued requests; wait here while paused. Raises Stop / GracefulStop to end the run."""
        requests = self.controls.drain()
        if requests or self.state == "paused" or self.controls.stopping():
            self.run.settle()  # a deferred step's values first: what a request acts on is every step so far
        self.apply(requests)
        while self.state == "paused" and not self.controls.stopping():
            self.controls.wait(PAUSE_POLL_S)
            self.apply(self.controls.drain())
        if self.controls.stop_event.is_set():
            raise Stop(self.controls.stop_reason or "aborted now, no checkpoint")
        if self.controls.graceful_event.is_set():
            raise GracefulStop(self.controls.graceful_reason or "aborted by request",
                               self.controls.graceful_exit_code or ExitCode.FINISHED)

    def apply(self, requests: list[Request]) -> None:
        """Answer each request in order (a ValueError from the run becomes a refusal)."""
        for request in requests:
            try:
                self._one(request)
            except ValueError as exc:  # TaskError is a ValueError: a task refusing a setting
                self.refuse(request, str(exc))

    def ack(self, request: Request, name: str, old: Any, new: Any, reason: str = "") -> None:
        """Answer ``request``: applied."""
        self.emit(ev.SettingChanged(name=name, old=old, new=new, reason=reason, step=self.run.step,
                                    request_id=request.id))

    def refuse(self, request: Request, why: str, predicted: int | None = None, budget: int | None = None) -> None:
        """Answer ``request``: not applied, and why."""
        self.emit(ev.Refused(request=request.to_dict(), why=why, step=self.run.step, request_id=request.id,
                             predicted=predicted, budget=budget))

    def _one(self, request: Request) -> None:
        action = request.action
        if action == "pause":
            if self.state == "paused":
                return self.refuse(request, "already paused")
            self.set_state("paused", "paused by request")
            return self.ack(request, "state", "running", "paused")
        if action == "resume":
            if self.state != "paused":
                return self.refuse(request, "not paused")
            self.set_state("running", "resumed by request")
            return self.ack(request, "state", "paused", "running")
        if action == "checkpoint_now":
            path = self.run.save_now(request.id)
            if path is None:
                return self.refuse(request, "checkpoint failed; see the checkpoint_failed event")
            return self.ack(request, "checkpoint", None, path)
        if action == "abort":  # the stop itself comes from the events Controls.submit set (boundary above)
            return self.ack(request, "state", self.state, "aborting", reason=f"abort ({request.mode}) by request")
        if action == "free_memory":
            if self.device.type != "cuda":
                return self.refuse(request, "nothing to free: training on CPU holds no cached device memory")
            before, after = release_cache(self.device)
            return self.ack(request, "reserved_bytes", before, after,
                            reason=f"freed {before - after} bytes of cached memory")
        if action == "set":
            return self._set(request)
        if action in self.routes:  # e.g. autotune (engine.training.autotune): acknowledged by its own events
            return self.routes[action](request)
        self.refuse(request, f"unknown action {action!r}")

    def _set(self, request: Request) -> None:
        """A set (and the settings asked for ``together`` with it): admitted as one change at the door
        (``LiveSettings.admit``), judged as one change, predicted (a dry run) or applied in order — the others
        each with its own SettingChanged, the request's own last, as its ack."""
        name = request.name
        settings = self.settings
        changes, error = settings.admit(request.changes)
        if error:
            return self.refuse(request, error)
        value = changes[name]
        judged = (self.budget.predict_change(changes) if any(map(settings.affects_memory, changes))
                  else {"predicted": None, "budget": None, "fits": True, "why": ""})
        if request.dry_run:
            return self.emit(ev.Prediction(name=name, value=value, predicted=judged["predicted"],
                                           budget=judged["budget"], fits=judged["fits"], refused=judged["why"],
                                           step=self.run.step, request_id=request.id))
        if judged["why"] and (not request.force or judged["predicted"] is None or judged.get("forceable") is False):
            return self.refuse(request, judged["why"], judged["predicted"], judged["budget"])
        for key, _ in request.together:
            before, why = self.change(key, changes[key])
            self.emit(ev.SettingChanged(name=key, old=before, new=changes[key], step=self.run.step,
                                        reason="; ".join(x for x in (f"with {name}={value}", why) if x)))
        old, note = self.change(name, value)
        if request.force:
            note = "; ".join(x for x in ("forced past the budget check" + (f" ({judged['why']})" if judged["why"]
                                                                            else ""), note) if x)
        self.ack(request, name, old, value, note)

    def change(self, name: str, value: Any) -> tuple[Any, str]:
        """Apply an admitted and judged change to the run: (old value, a note); the batch source follows a change
        of what it runs on (threads, data workers) or of the task's batches."""
        old, note = self.settings.change(name, value)
        applies = self.settings.table.get(name).applies
        if applies == "batch_source":
            self.prefetch.override(**{name: value})
        elif applies == "task" and self.settings.affects_data(name):
            self.prefetch.task_changed()  # data workers hold a copy of the task: they restart from the new one
        return old, note
