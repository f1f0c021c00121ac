"""The cockpit around a loop of your own: one ``with`` block, one call per step.

    with cockpit("runs/mine", model=model, optimizer=optimizer, total_steps=1000, save_every=100) as run:
        for step in range(run.start_step, 1000):
            loss = train_one_step(...)
            run.step(loss=loss, accuracy=acc)     # the step boundary: log it, obey the controls
            if step % 100 == 0:
                run.eval(val_loss=evaluate(model))

``run.step`` is where the controls land, so call it last in the step:

- pause blocks inside it (every rank of a torch.distributed job at the same step);
- checkpoint now calls your ``save()`` (which returns the path it wrote), or
  without one writes ``{"model", "optimizer", "step"}`` state dicts atomically
  to ``checkpoints/last.pt``, the previous one kept as ``last.prev.pt``
  (engine.app.integrations.state_file);
- a graceful abort saves the same way, then ``run.step`` raises ``StopRun``,
  which the ``with`` block swallows: the code after it runs and the script
  exits 0. Abort now raises it without a save;
- settings are refused: the loop is yours.

Resume: run the same script again on the same directory. With the default
save, ``cockpit`` loads ``checkpoints/last.pt`` (``last.prev.pt`` when that one
does not load; neither: CockpitError, one line naming them) into the model and
optimizer and ``run.start_step`` is its step (``resume=False`` starts afresh
into the same log); with your own ``save``, restore your file yourself and pass
``start_step``. A crash (even SIGKILL) leaves the directory a run that
``runs`` lists as crashed, with this script as its resume command.

Memory: measured every run; predicted when ``loss_fn(model, batch)`` and an
``example_batch`` are given (traced on fake tensors, engine.budget.trace_step).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from engine.app.integrations.core import Cockpit, CockpitError
from engine.app.integrations.ranks import torch_group
from engine.app.integrations.state_file import StateFile, StateFileError
from engine.core.taskspec import Metric


class StopRun(Exception):
    """Raised by ``Run.step`` when the run was aborted; the ``with cockpit(...)`` block ends quietly."""


def cockpit(run_dir: str | Path | None = None, *, model=None, optimizer=None, save: Callable[[], Any] | None = None,
            save_every: int = 0, total_steps: int = 0, start_step: int | None = None, resume: bool = True,
            config: dict | None = None, loss_fn: Callable | None = None, example_batch: Any = None,
            primary: str = "val_loss", higher_is_better: bool = False, log_every: int | None = None) -> "Run":
    """A ``Run`` to use as a context manager (module docstring). ``primary`` names the metric ``runs`` and the
    dashboard rank evaluations by; ``save_every`` saves every this many steps (0: only when asked);
    ``log_every`` logs every this many steps (None: every step, at most one each ``core.STEP_EVENT_S``)."""
    return Run(run_dir, model=model, optimizer=optimizer, save=save, save_every=save_every, total_steps=total_steps,
               start_step=start_step, resume=resume, config=config, loss_fn=loss_fn, example_batch=example_batch,
               primary=Metric(primary, primary.replace("_", " "), higher_is_better=higher_is_better),
               log_every=log_every)


class Run:
    """One run of a plain loop in the cockpit; made by ``cockpit``."""

    def __init__(self, run_dir, *, model, optimizer, save, save_every: int, total_steps: int,
                 start_step: int | None, resume: bool, config: dict | None, loss_fn, example_batch,
                 primary: Metric, log_every: int | None = None) -> None:
        self.cockpit = Cockpit(run_dir, "loop", group=torch_group(), primary=primary,
                               label="your training loop")
        self.model, self.optimizer, self.user_save = model, optimizer, save
        self.save_every, self.total_steps = max(0, int(save_every)), int(total_steps)
        self.log_every = log_every
        self.config, self.resume = config, resume
        self.trace = (loss_fn, example_batch) if loss_fn is not None and example_batch is not None else None
        #: The step this run continues from (0 for a fresh run; the saved step when resumed).
        self.start_step = int(start_step or 0)
        #: The last step logged so far.
        self.step_count = self.start_step
        self.memory = None
        self.state_file = StateFile(self.cockpit.run_dir.checkpoints)
        self._resumed_from: str | None = None
        self._passed_over: list[str] = []  # saved states newer than the one resumed, that did not load

    @property
    def run_dir(self) -> Path:
        """The run directory."""
        return self.cockpit.run_dir.root

    @property
    def last_checkpoint(self) -> str | None:
        """The newest checkpoint this run wrote (or resumed from)."""
        return self.cockpit.last_checkpoint

    # ------------------------------------------------------------------ with
    def __enter__(self) -> "Run":
        restore = self.resume and self.user_save is None
        # rank 0 reads its saved state before a byte of the directory is written: a state that cannot be read
        # refuses the run and leaves the directory as it was
        self.cockpit.open({"train": {"total_steps": self.total_steps, "save_every": self.save_every},
                           **(self.config or {})}, prepare=self._restore if restore else None)
        if restore and not self.cockpit.owner:
            self._restore()
        if self.cockpit.owner:
            for line in self._passed_over:
                self.cockpit.warn(f"resume: {line}; resumed from {self._resumed_from}")
            self._announce()
        return self

    def __exit__(self, kind, error, trace) -> bool:
        if self.memory is not None:
            self.memory.abandon()
        if kind is None:
            self.cockpit.finish("finished")
            return False
        if issubclass(kind, StopRun):
            self.cockpit.finish("aborted", str(error) or "aborted by request", 0)
            return True
        if issubclass(kind, KeyboardInterrupt):
            self.cockpit.finish("interrupted", "KeyboardInterrupt", 130)
        else:
            self.cockpit.finish("failed", f"{kind.__name__}: {error}", 1)
        return False

    def _announce(self) -> None:
        """RunStarted, after the memory prediction (when the step was handed over)."""
        from engine.budget.measure import device_info
        from engine.core.estimate import BudgetSummary

        params, device = 0, None
        if self.model is not None:
            from engine.app.integrations.memory import StepMemory
            from engine.optim.device import describe

            first = next(iter(self.model.parameters()), None)
            device = first.device if first is not None else None
            params = sum(p.numel() for p in self.model.parameters())
            self.memory = StepMemory(self.model, lambda: self.optimizer, device or "cpu")
            if self.trace is not None:
                self.memory.predict(*self.trace, loop_holds=True)  # a loop of your own may hold outputs and a batch
            else:
                self.memory.why = "no loss_fn and example_batch given to trace the step with"
            budget, name = self.memory.summary(), describe(device) if device is not None else "CPU"
            self.memory.begin(self.start_step + 1)
        else:
            info = device_info("cpu")
            budget, name = BudgetSummary(source="measured", note="measured only: no model given",
                                         capacity=info.total, device="cpu", device_name=info.name), "CPU"
        self.cockpit.started(total_steps=self.total_steps, start_step=self.start_step, params=params,
                             preset=type(self.model).__name__ if self.model is not None else "",
                             device=device.type if device is not None else "cpu", device_name=name, budget=budget,
                             resumed_from=self._resumed_from,
                             config=self.cockpit.describe({"train": {"total_steps": self.total_steps}}))

    # ------------------------------------------------------------------ the loop's calls
    def step(self, loss: Any = None, **metrics: Any) -> int:
        """One step done: log it (``loss`` and any other numbers, tensors read once), save when due, obey the
        controls (may block while paused, or raise StopRun). Returns the step count."""
        cockpit = self.cockpit
        self.step_count += 1
        step = self.step_count
        if cockpit.owner:
            if self.memory is not None:
                sample = self.memory.end(step)
                if sample is not None:
                    cockpit.emit(sample)
            if cockpit.due(step, self.log_every):  # the numbers are read (a device sync) only when logged
                lr = self.optimizer.param_groups[0].get("lr", 0.0) if self.optimizer is not None else 0.0
                cockpit.logged(step, loss, metrics, lr=lr)
        if self.save_every and step % self.save_every == 0:
            self._save([], "last")
        decision = cockpit.boundary(step, lambda ids: self._save(ids, "manual"))
        if decision.stop == "graceful":
            self._save([], "final")
            raise StopRun(cockpit.controls.graceful_reason or "aborted by request")
        if decision.stop == "now":
            raise StopRun(cockpit.controls.stop_reason or "aborted now, no checkpoint")
        if self.memory is not None:
            self.memory.begin(step + 1)
        return step

    def eval(self, **metrics: Any) -> None:
        """A validation pass's numbers at the current step (``val_loss`` and whatever else you measure); a value
        that is not a number is dropped, said once."""
        self.cockpit.evaluated(self.step_count, metrics)

    def checkpoint(self) -> str | None:
        """Save now (your ``save``, or the default); the path written, None when it failed."""
        return self._save([], "manual")

    # ------------------------------------------------------------------ saving and restoring
    def _save(self, request_ids: list[str], kind: str) -> str | None:
        step = self.step_count
        started = time.perf_counter()
        try:
            if self.user_save is not None:
                written = self.user_save()
                path = str(written) if written is not None else None
            else:
                path = str(self.state_file.write(self._state())) if self.cockpit.owner else None
        except Exception as exc:  # a full disk must not end the run; the request (if any) gets the reason
            self.cockpit.save_failed(step, f"{type(exc).__name__}: {exc}", request_ids)
            return None
        if path is not None:
            self.cockpit.saved(step, path, kind, request_ids, seconds=time.perf_counter() - started)
        elif request_ids:
            self.cockpit.save_failed(step, "save() returned no path", request_ids)
        return path

    def _state(self) -> dict:
        """What the default save writes: the step, the model's and the optimizer's state dicts."""
        state: dict = {"step": self.step_count}
        if self.model is not None:
            state["model"] = self.model.state_dict()
        if self.optimizer is not None:
            state["optimizer"] = self.optimizer.state_dict()
        return state

    def _restore(self) -> None:
        """The newest saved state that loads (engine.app.integrations.state_file) into the model and optimizer;
        CockpitError (one line naming the files) when states are there and none loads or fits."""
        try:
            found = self.state_file.read()
        except StateFileError as exc:
            raise CockpitError(str(exc)) from None
        if found is None:
            return
        state, path, self._passed_over = found
        try:
            if self.model is not None and "model" in state:
                self.model.load_state_dict(state["model"])
            if self.optimizer is not None and "optimizer" in state:
                self.optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, ValueError, KeyError, TypeError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise CockpitError(f"{path}: does not fit this model and optimizer ({first[:160]}); move it out of "
                               "checkpoints/ to start afresh, or pass resume=False") from None
        self.start_step = self.step_count = int(state.get("step", 0))
        self._resumed_from = self.cockpit.last_checkpoint = str(path.absolute())
