"""Which scalars a run logs, how each is labelled, and which curve overlays which.

The dashboard learns a task's numbers from ``RunStarted.capabilities`` (its
primary metric with unit and direction, its declared curves) and from the
events themselves: every ``StepLogged`` carries loss, grad norm, LR,
throughput and the loss components; every ``EvalDone.metrics`` carries the
validation metrics by name. This module names no task: a plugin's run is
charted from what it declares and logs. A run that declares nothing (an old
run) gets the engine's fallback primary, val_loss (lower is better).

Overlays: a training scalar ``x`` and a validation metric ``val_x`` (or ``x``)
are one picture (val_loss over loss), whichever of the two is chosen.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.taskspec import Capabilities, Metric

#: Per-step scalars of StepLogged besides the loss components, with how to show them.
STEP_SCALARS: dict[str, Metric] = {
    "loss": Metric("loss", "loss", "", False, "train"),
    "grad_norm": Metric("grad_norm", "grad norm", "", False, "train"),
    "lr": Metric("lr", "learning rate", "", False, "train"),
    "samples_per_s": Metric("samples_per_s", "throughput", "samples/s", True, "train"),
    "steps_per_s": Metric("steps_per_s", "speed", "steps/s", True, "train"),
}
#: A validation metric every run reports.
VAL_LOSS = Metric("val_loss", "val loss", "", False, "val")
#: Prefix that pairs a validation metric with its training counterpart.
VAL_PREFIX = "val_"


@dataclass(frozen=True)
class Choice:
    """One entry of the metric chooser: the metric and whether it is the task's primary."""

    metric: Metric
    primary: bool = False

    @property
    def name(self) -> str:
        """The metric's key in events."""
        return self.metric.name


def capabilities_of(raw: dict | None) -> Capabilities:
    """RunStarted.capabilities as a Capabilities (an empty dict gives the val_loss fallback)."""
    try:
        return Capabilities.from_dict(raw or None)
    except (TypeError, ValueError):  # a malformed declaration: chart what the events carry
        return Capabilities.from_dict(None)


def describe(name: str, caps: Capabilities, kind: str | None = None) -> Metric:
    """How to show the scalar ``name``: declared by the task, a built-in step scalar, else its bare name."""
    for metric in (caps.primary, *caps.curves):
        if metric.name == name and (kind is None or metric.kind == kind):
            return metric
    if name in STEP_SCALARS:
        return STEP_SCALARS[name]
    if name == VAL_LOSS.name:
        return VAL_LOSS
    return Metric(name, name.replace("_", " "), "", False, kind or ("val" if name.startswith(VAL_PREFIX) else "train"))


def pair(name: str, train_names, val_names) -> tuple[str | None, str | None]:
    """(training scalar, validation metric) drawn for a chosen ``name``: loss and val_loss are one picture,
    and a name logged both per step and per eval (a loss component) shows both."""
    train = name if name in train_names else None
    if train is None and name.startswith(VAL_PREFIX) and name[len(VAL_PREFIX):] in train_names:
        train = name[len(VAL_PREFIX):]
    val = name if name in val_names else None
    if val is None and VAL_PREFIX + name in val_names:
        val = VAL_PREFIX + name
    return train, val


def catalog(caps: Capabilities, train_names: list[str], val_names: list[str]) -> list[Choice]:
    """Every scalar the run logs, primary first, then loss, the validation metrics, components, the rest."""
    out: list[Choice] = []
    seen: set[str] = set()

    def add(name: str, kind: str, primary: bool = False) -> None:
        if name not in seen:
            seen.add(name)
            out.append(Choice(describe(name, caps, kind), primary))

    add(caps.primary.name, caps.primary.kind, primary=True)
    if "loss" in train_names:
        add("loss", "train")
    for name in val_names:
        add(name, "val")
    for name in train_names:
        if name not in STEP_SCALARS:
            add(name, "train")
    for name in STEP_SCALARS:
        if name in train_names:
            add(name, "train")
    return out
