"""Which metrics a run has and how each is shown: the task's declaration, the evals' metrics and their series.

The task declares its primary metric and curves on RunStarted; a run that
declares nothing still names its primary on each EvalDone, and its direction
is then read off the engine's running ``best``. Validation series are kept as
the eval events themselves (a few hundred at most), so a resumed run that
re-evaluates a step replaces the old eval rather than adding a second point.
What is read off them (each validation series, the primary the evals name) is
kept until an eval arrives: a frame asks for them many times, and a 100M-step
run evaluated every 100k steps has a thousand evals.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from engine.run import events as ev
from tui.model import metrics as mx


def eval_metrics(e: ev.EvalDone) -> dict:
    """Every validation metric of an eval by name (an event without ``metrics`` still has its val_loss)."""
    out = dict(getattr(e, "metrics", None) or {})
    val_loss = getattr(e, "val_loss", None)
    if "val_loss" not in out and isinstance(val_loss, (int, float)) and np.isfinite(val_loss):
        out["val_loss"] = val_loss
    return out


class Catalogue:
    """The task's capabilities, every eval, and the validation metrics in the order they first appeared."""

    def __init__(self) -> None:
        #: The task's declared capabilities (primary metric, curves); the val_loss fallback until declared.
        self.capabilities = mx.capabilities_of(None)
        #: True when the run declared its capabilities (the primary's direction is then known).
        self.declared = False
        self.evals: list[ev.EvalDone] = []
        self._val_names: list[str] = []
        self._read: dict = {}  # what was read off the evals (val series, the named primary), until the next eval

    def declare(self, raw: dict | None) -> None:
        """RunStarted.capabilities (None or empty: a run from before capabilities)."""
        self.capabilities = mx.capabilities_of(raw)
        self.declared = bool(raw)

    def add_eval(self, e: ev.EvalDone) -> dict:
        """Keep an eval (replacing those at or after its step: a resumed run re-evaluates them); its metrics."""
        named = self._read.get("primary")  # the newest eval's primary stays so unless evals are replaced
        while self.evals and self.evals[-1].step >= e.step:
            self.evals.pop()
            named = None
        self.evals.append(e)
        self._read.clear()
        if getattr(e, "primary", "") or named is not None:
            self._read["primary"] = getattr(e, "primary", "") or named
        values = eval_metrics(e)
        self._val_names += [name for name in values if name not in self._val_names]
        return values

    def val_names(self) -> list[str]:
        """Validation metrics this run reports, in the order they first appeared."""
        return list(self._val_names)

    @property
    def primary(self):
        """The primary metric (engine.core.taskspec.Metric): declared, else named by the evals, else val_loss."""
        metric, inferred = self.named_primary()
        if not inferred:
            return metric
        return replace(metric, higher_is_better=self._infer_higher(metric.name, metric.higher_is_better))

    def named_primary(self):
        """(the primary metric, whether its direction must be inferred): cheap, for labels and names only.

        Inferring the direction reads every eval, so a caller that runs once per eval (quadratic over a
        long history) asks here instead.
        """
        caps = self.capabilities
        if self.declared:
            return caps.primary, False
        if "primary" not in self._read:
            self._read["primary"] = next((getattr(e, "primary", "") for e in reversed(self.evals)
                                          if getattr(e, "primary", "")), "")
        named = self._read["primary"]
        if not named:
            return caps.primary, False
        return mx.describe(named, caps, "val"), True

    def _infer_higher(self, name: str, default: bool) -> bool:
        """An undeclared primary's direction, read off the engine's running ``best`` (the max or the min)."""
        xs, ys = self.val_series(name)
        best = next((e.best for e in reversed(self.evals) if isinstance(e.best, (int, float))), None)
        finite = ys[np.isfinite(ys)]
        if best is None or not len(finite) or finite.max() == finite.min():
            return default
        return abs(best - finite.max()) <= abs(best - finite.min())

    def describe(self, name: str):
        """Label, unit and direction of the scalar ``name``."""
        if name == self.named_primary()[0].name:
            return self.primary
        return mx.describe(name, self.capabilities)

    def choices(self, train_names: list[str]) -> list[mx.Choice]:
        """Every scalar the chooser offers (``train_names``: the per-step ones stored), primary first."""
        caps = self.capabilities
        if self.primary.name != caps.primary.name:
            caps = type(caps)(primary=self.primary, curves=caps.curves)
        return mx.catalog(caps, train_names, self.val_names())

    def pair(self, name: str, train_names: list[str]) -> tuple[str | None, str | None]:
        """(training scalar, validation metric) drawn when ``name`` is chosen (loss ↔ val_loss)."""
        return mx.pair(name, train_names, self.val_names())

    def val_series(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of a validation metric over every eval that reported it (do not change them)."""
        key = ("val", name)
        if key not in self._read:
            self._read[key] = self._val_series(name)
        return self._read[key]

    def _val_series(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        pairs = [(e.step, v) for e in self.evals if isinstance(v := eval_metrics(e).get(name), (int, float))]
        if not pairs:
            return np.empty(0), np.empty(0)
        arr = np.asarray(pairs, dtype=np.float64)
        return arr[:, 0], arr[:, 1]

    def best_of(self, name: str) -> tuple[int, float] | None:
        """(step, value) of the best value of validation metric ``name``, by its declared direction."""
        xs, ys = self.val_series(name)
        finite = np.isfinite(ys)
        if not finite.any():
            return None
        higher = self.describe(name).higher_is_better
        i = int(np.argmax(np.where(finite, ys, -np.inf)) if higher else np.argmin(np.where(finite, ys, np.inf)))
        return int(xs[i]), float(ys[i])

    def abort_threshold(self, policies: dict) -> float | None:
        """The primary value past which the engine's abort policy counts an eval as bad (``policies``: the run's
        policies section): ``policies.abort_drop`` (or the older ``abort_drop_db``) away from the best, on the
        worse side."""
        best = self.best_of(self.primary.name)
        if best is None or not policies.get("abort_patience", 2):
            return None
        drop = policies.get("abort_drop", policies.get("abort_drop_db", 1.5))
        if not isinstance(drop, (int, float)):
            return None
        return best[1] - float(drop) if self.primary.higher_is_better else best[1] + float(drop)
