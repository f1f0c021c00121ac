"""Validation: a pass over the fixed validation subset, the primary metric's best and abort rule, the overfit gate.

Metrics reduce over the set in one of two ways: a task's ``eval_batch`` that
returns plain numbers gives per-batch means, weighted by batch size; one that
returns ``(sum, count)`` pairs is pooled (summed over the set, divided once),
which is what a token-weighted loss needs. ``Task.finalize_metrics`` then
derives what depends on the reduced means (e.g. perplexity). The pass checks
``interrupted()`` between batches, so a stop during a long evaluation does not
wait for its end (the pass is dropped, the loop checkpoints and stops).

State for a checkpoint: what the abort policy has seen (best, its reference,
the streak) and the first validation loss (the overfit gate's reference).
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from engine.core.core_sections import EvaluationConfig, PoliciesConfig
from engine.core.exit_codes import ExitCode
from engine.run import events as ev
from engine.training.control_handler import GracefulStop
from engine.training.overfit_gate import OverfitGate, verdict
from engine.training.policies import AbortPolicy


class Evaluator:
    """Runs validation passes for one task and judges them (best, abort, overfit gate)."""

    def __init__(self, evaluation: EvaluationConfig, policies: PoliciesConfig, task, gate: OverfitGate | None = None,
                 emit: Callable[[ev.Event], None] = lambda event: None, agree: Callable[[bool], bool] = bool,
                 warmup_steps: int = 0, clock: Callable[[], float] = time.monotonic) -> None:
        """The run's ``evaluation`` section and the abort rule of its ``policies``; ``gate`` is the preflight a
        fresh run passes before its first evaluation (``evaluation.overfit_gate``; none: no gate); ``emit``
        takes the gate's events; ``agree`` makes its verdict every rank's (engine.training.policies); the abort
        rule is armed once ``warmup_steps`` are done, and counts its patience's seconds on ``clock``."""
        self.evaluation = evaluation
        self.task = task
        self.emit, self.agree = emit, agree
        self.gate = gate
        from engine.core.registry import get_spec

        #: The task's declared primary metric (engine.core.taskspec.Metric): decides best and the abort rule.
        self.primary = get_spec(task.config.task.name).capabilities.primary
        self.abort = AbortPolicy(policies.abort_drop, policies.abort_patience, self.primary.higher_is_better,
                                 armed_from=warmup_steps, patience_steps=policies.abort_patience_steps,
                                 patience_s=policies.abort_patience_s)
        self.clock = clock
        #: Validation loss of the first (untrained) and the latest evaluation.
        self.first_val_loss: float | None = None
        self.last_val_loss: float | None = None
        #: Why the abort rule fired at the latest evaluation ("" when it did not).
        self.abort_reason = ""

    def run(self, model, step: int, micro: int, autocast: Callable, device: torch.device,
            interrupted: Callable[[], bool]) -> ev.EvalDone | None:
        """One pass in micro-batches of ``micro``; the EvalDone, or None when ``interrupted()`` cut it short.

        The first pass of a fresh run (step 0, no reference loss yet: a resumed run has one) is preceded by
        the overfit gate when ``evaluation.overfit_gate`` asks for it; a failed gate raises GracefulStop (status
        failed, exit 1, the verdict as the reason, no checkpoint)."""
        if step == 0 and self.first_val_loss is None:
            failed = self.gate.check(self.task, model, device, self.emit, autocast) if self.gate else ""
            if self.agree(bool(failed)):  # every rank stops, or none
                raise GracefulStop(failed or "overfit gate failed on another rank", ExitCode.POLICY,
                                   checkpoint=False, status="failed")
        started = time.perf_counter()
        overfit = self.evaluation.overfit
        indices = list(range(overfit)) if overfit else self.task.val_indices()
        sums: dict[str, float] = {}
        counts: dict[str, float] = {}
        model.eval()
        try:
            with torch.no_grad():
                for start in range(0, len(indices), micro):
                    if interrupted():
                        return None
                    chunk = indices[start: start + micro]
                    host = self.task.make_batch(chunk, 0, train=bool(overfit))
                    batch = {k: v.to(device) for k, v in host.items()}
                    with autocast():
                        metrics = self.task.eval_batch(model, batch)
                    for key, value in metrics.items():
                        total, count = value if isinstance(value, (tuple, list)) else (float(value) * len(chunk),
                                                                                       len(chunk))
                        sums[key] = sums.get(key, 0.0) + float(total)
                        counts[key] = counts.get(key, 0.0) + float(count)
        finally:
            model.train()
        means = self.task.finalize_metrics({k: v / max(counts[k], 1e-30) for k, v in sums.items()})
        return self._judge(step, means, time.perf_counter() - started)

    def _judge(self, step: int, means: dict[str, float], seconds: float) -> ev.EvalDone:
        metric = self.primary.name
        value = means.get(metric, means.get("val_loss"))
        is_best, abort = self.abort.update(value, step, self.clock())
        if self.abort.not_finite_from == step:  # a run of evals that are not finite begins: said once
            self.emit(ev.Warning(text=self.abort.not_finite_line(metric, value, step), step=step))
        self.abort_reason = self.abort.reason(metric, value, step) if abort else ""
        val_loss = means.pop("val_loss", float("nan"))
        if self.first_val_loss is None:
            self.first_val_loss = val_loss
        self.last_val_loss = val_loss
        metrics = {"val_loss": val_loss, **means}
        return ev.EvalDone(step=step, val_loss=val_loss, metrics=metrics, primary=metric,
                           best=self.abort.best, is_best=is_best, seconds=seconds)

    def end_note(self) -> str:
        """What the run's end line adds about the primary metric ("" unless its last evals were not finite)."""
        return self.abort.end_note(self.primary.name)

    def overfit_verdict(self) -> tuple[bool, str]:
        """(failed, the line that says so) for an overfit run; (False, "") otherwise."""
        if not self.evaluation.overfit:
            return False, ""
        return verdict(self.first_val_loss, self.last_val_loss, self.evaluation.overfit_target)

    def state_dict(self) -> dict:
        """JSON for a checkpoint: ``abort`` (the policy's state) and ``first_val_loss``."""
        return {"abort": self.abort.state(), "first_val_loss": self.first_val_loss}

    def load_state_dict(self, state: dict) -> None:
        """Continue judging from a checkpoint's state (the rule's settings stay this run's config: a resume with
        ``--set policies.abort_patience=0`` turns it off)."""
        self.abort.load_state(state["abort"])
        self.first_val_loss = state.get("first_val_loss")
