"""The cockpit in a ``transformers.Trainer`` run: ``Trainer(..., callbacks=[CockpitCallback("runs/mine")])``.

What comes from the Trainer: steps from ``state.global_step``; the loss,
gradient norm and learning rate from ``on_log`` (every ``logging_steps``: the
Trainer averages the loss over them); evaluations from ``on_evaluate``
(``eval_loss`` becomes ``val_loss``, ``eval_<name>`` becomes ``<name>``);
checkpoints from ``on_save`` (the ``checkpoint-N`` directory it wrote).

What the controls do, at ``on_step_end`` (every rank, agreed through
torch.distributed when a process group is up):

- pause blocks in the callback;
- checkpoint now sets ``control.should_save``: the Trainer writes its own
  ``checkpoint-N`` right after this step, and ``on_save`` answers the request
  with its path;
- a graceful abort sets ``control.should_save`` and
  ``control.should_training_stop``: the step ends, the Trainer saves and
  ``train()`` returns; the script exits 0;
- abort now sets only ``control.should_training_stop``;
- settings are refused: the Trainer owns them.

Memory is measured; it is predicted when ``example_batch`` (one batch as the
model takes it, ``model(**batch)``) is given, by tracing two steps on fake
tensors. transformers is imported when this module is.
"""

from __future__ import annotations

import time
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from engine.app.integrations.core import Cockpit
from engine.app.integrations.memory import StepMemory
from engine.app.integrations.ranks import torch_group
from engine.core.taskspec import Metric

#: Numbers transformers adds to every evaluation's metrics that say how long it took, not how well it did.
EVAL_TIMINGS = ("runtime", "samples_per_second", "steps_per_second")


class CockpitCallback(TrainerCallback):
    """Writes ``run_dir`` (default runs/<timestamp>) as the engine would and obeys its controls (module docstring).

    ``example_batch``: a batch for ``model(**batch)`` to trace the step's memory (else measured only).
    ``config``: extra sections for config.toml.
    """

    def __init__(self, run_dir: str | Path | None = None, *, example_batch: dict | None = None,
                 config: dict | None = None) -> None:
        self.run_dir = run_dir
        self.example_batch = example_batch
        self.config = config
        self.cockpit: Cockpit | None = None
        self.memory: StepMemory | None = None
        self._pending: list[str] = []  # checkpoint-now requests the next save answers
        self._stopped: tuple[str, str] | None = None
        self._saving_final = False
        self._held = False  # paused when a checkpoint was asked for: the pause goes on in on_save, after it
        self._last_hook = time.perf_counter()  # when the last hook before a save returned (its start)

    # ------------------------------------------------------------------ start
    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        primary = None
        if args.metric_for_best_model:
            name = _metric_name(args.metric_for_best_model)
            primary = Metric(name, name.replace("_", " "), higher_is_better=bool(args.greater_is_better))
        self.cockpit = Cockpit(self.run_dir, "transformers", group=torch_group(), primary=primary,
                               label="the transformers Trainer").open({"train": _args_config(args),
                                                                        **(self.config or {})})
        if not self.cockpit.owner:
            return
        from engine.optim.device import describe

        device = next(model.parameters()).device
        self.memory = StepMemory(model, lambda: optimizer, device)
        if self.example_batch is not None:
            batch = {k: v.to(device) if hasattr(v, "to") else v for k, v in self.example_batch.items()}
            self.memory.predict(lambda module, data: module(**data), batch)
        else:
            self.memory.why = "no example_batch given to trace the step with"
        self.cockpit.started(total_steps=int(state.max_steps or 0), start_step=int(state.global_step),
                             preset=type(model).__name__, params=sum(p.numel() for p in model.parameters()),
                             device=device.type,
                             device_name=describe(device), budget=self.memory.summary(),
                             resumed_from=_resumed_from(args, state),
                             config=self.cockpit.describe({"train": _args_config(args)}))

    # ------------------------------------------------------------------ steps
    def on_step_begin(self, args, state, control, **kwargs):
        if self.memory is not None:
            self.memory.begin(state.global_step + 1)

    def on_step_end(self, args, state, control, **kwargs):
        cockpit, step = self.cockpit, state.global_step
        if cockpit is None:
            return
        if self.memory is not None:
            sample = self.memory.end(step)
            if sample is not None:
                cockpit.emit(sample)
            if cockpit.status is not None:
                cockpit.status.update(step=step)

        def save(request_ids: list[str]) -> None:  # the Trainer saves right after this step; on_save answers
            self._pending += request_ids
            control.should_save = True

        # A save asked for while paused returns from the boundary: the Trainer can save only once this hook
        # has returned, and the pause goes on in on_save, after the save, at the same step.
        decision = cockpit.boundary(step, save, save_later=True)
        self._held = decision.paused and not decision.stop
        self._obey(decision, control, save_first=True)
        self._last_hook = time.perf_counter()
        return control

    def _obey(self, decision, control, save_first: bool) -> None:
        """A stop the boundary decided: a graceful one saves first (unless the state on disk is already this
        step's), then the Trainer's loop ends after this step."""
        controls = self.cockpit.controls
        if decision.stop == "graceful":
            if save_first:
                control.should_save = self._saving_final = True
            self._stopped = ("aborted", controls.graceful_reason or "aborted by request")
        elif decision.stop == "now":
            self._stopped = ("aborted", controls.stop_reason or "aborted now, no checkpoint")
        if decision.stop:
            control.should_training_stop = True

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if self.cockpit is None or "loss" not in logs:  # evaluations come through on_evaluate
            return
        components = {k: v for k, v in logs.items()
                      if k not in ("loss", "grad_norm", "learning_rate", "epoch") and not k.startswith("eval_")}
        self.cockpit.logged(state.global_step, logs["loss"], components, lr=logs.get("learning_rate", 0.0),
                            grad_norm=logs.get("grad_norm", float("nan")), epoch=int(state.epoch or 0),
                            batch_size=args.per_device_train_batch_size * args.world_size)
        self._last_hook = time.perf_counter()

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if self.cockpit is None or not metrics:
            return
        values = {_metric_name(k): v for k, v in metrics.items()
                  if not any(k.endswith(timing) for timing in EVAL_TIMINGS) and k != "epoch"}
        seconds = self.cockpit.numbers.read("eval_runtime", metrics.get("eval_runtime", 0.0)) or 0.0
        self.cockpit.evaluated(state.global_step, values, seconds)
        self._last_hook = time.perf_counter()

    def on_save(self, args, state, control, **kwargs):
        """The Trainer wrote ``checkpoint-N`` (it saves after every other hook of the step has returned: the
        last one's end is the save's start). Answers the requests it was for; a pause asked before it goes on
        here."""
        cockpit, step = self.cockpit, state.global_step
        if cockpit is None:
            return
        seconds = time.perf_counter() - self._last_hook
        path = Path(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{step}").absolute()
        kind = "final" if self._saving_final else "manual" if self._pending else "step"
        ids, self._pending = self._pending, []
        if path.exists() or not cockpit.owner:
            cockpit.saved(step, path, kind, ids, seconds=seconds)
        else:
            cockpit.save_failed(step, f"{path} was not written", ids)
        if self._held:
            self._held = False
            # nothing trains while paused: the checkpoint just written is this step's state, and answers any
            # checkpoint asked for before the pause ends
            decision = cockpit.boundary(step, lambda more: cockpit.already_saved(step, str(path), more))
            self._obey(decision, control, save_first=False)
        return control

    # ------------------------------------------------------------------ the end
    def on_train_end(self, args, state, control, **kwargs):
        if self.cockpit is None:
            return
        status, reason = self._stopped or ("finished", "")
        self.cockpit.finish(status, reason, 0)


def _resumed_from(args, state) -> str | None:
    """What a resumed Trainer continues from: ``checkpoint-N`` of its output directory (the one
    ``resume_from_checkpoint=True`` picks), absolute; None for a fresh run. The Trainer keeps no other record of
    the path it was given."""
    if not state.global_step:
        return None
    path = Path(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}").absolute()
    return str(path) if path.is_dir() else f"a checkpoint of step {state.global_step}"


def _metric_name(name: str) -> str:
    """The cockpit's name of a transformers metric: eval_loss → val_loss, eval_accuracy → accuracy."""
    name = name.removeprefix("eval_")
    return "val_loss" if name == "loss" else name


def _args_config(args) -> dict:
    """The TrainingArguments worth a line in config.toml."""
    return {"max_steps": args.max_steps, "num_train_epochs": args.num_train_epochs,
            "per_device_train_batch_size": args.per_device_train_batch_size,
            "gradient_accumulation_steps": args.gradient_accumulation_steps, "learning_rate": args.learning_rate,
            "output_dir": str(args.output_dir), "world_size": args.world_size}
