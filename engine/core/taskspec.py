"""What a task declares about itself, torch-free: its config section, presets and capabilities.

The engine core and every viewer know no task by name. They learn from a
``TaskSpec`` what a task's config section looks like, which presets it has,
and from its ``Capabilities`` what to do with its numbers: which metric
decides `best` and the abort rule (and with which unit and direction), which
curves are worth plotting, which settings may change live and within what
bounds, how its memory is predicted, what it exports, and how its validation
metrics reduce over the set.

A spec is importable without torch, so `--help`, `presets`, `plan` and the
config loader stay instant; the task class itself (which imports torch) is
named by a ``"module:Class"`` string and imported only when a run needs it.
``Capabilities`` travels in ``RunStarted.capabilities`` as a plain dict
(``to_dict``/``from_dict``), so a viewer of a plugin's run needs no plugin.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Mapping

#: How a validation metric reduces over the validation set.
#: "per_batch": mean of per-batch means weighted by batch size (right for per-sample means, e.g. a per-sample quality
#: score);
#: "pooled": the task returns sums and counts and the engine divides once (right for token-level losses).
Reduction = Literal["per_batch", "pooled"]


@dataclass(frozen=True)
class Metric:
    """A number a task reports: its key in events, how to label it, its unit, and which way is better."""

    name: str
    label: str = ""
    unit: str = ""
    higher_is_better: bool = True
    #: "train" (a loss component in StepLogged.components) or "val" (a key in EvalDone.metrics).
    kind: Literal["train", "val"] = "val"
    #: Reference lines for this metric's chart: (label, validation metric whose latest value is the line),
    #: e.g. a baseline scored on the same validation set.
    guides: tuple[tuple[str, str], ...] = ()

    def title(self) -> str:
        """Label with unit, e.g. "accuracy (%)"."""
        text = self.label or self.name
        return f"{text} ({self.unit})" if self.unit else text


@dataclass(frozen=True)
class Setting:
    """A setting a viewer may change while the run trains, with its allowed values.

    ``path`` is where it lives in the resolved config, dotted from the top
    (``train.batch_size``, or inside the task's own section such as
    ``<task>.model.<field>``). ``kind`` "int" and "float" are bounded by
    ``minimum``/``maximum`` (both required: a live value nobody bounded is how
    ``lr=1e308`` reached a running optimizer); "choice" takes one of ``choices``.
    For "int" and "float", ``choices`` (optional) are the values ``plan`` tries,
    not a limit. ``choices`` are listed fastest first: ``plan`` recommends the
    first that fits.

    The same shape lists the engine's own live settings (engine.core.live_table),
    so every view treats both alike. A live value is checked once, by ``admit``
    at the engine's door, and then written to the config as it is: the bounds
    and choices declared here must be values the config field at ``path``
    accepts (tests/test_live_table.py checks the built-in tasks').
    """

    name: str
    path: str
    kind: Literal["int", "float", "choice"] = "int"
    choices: tuple = ()
    minimum: float | None = None
    maximum: float | None = None
    label: str = ""
    help: str = ""
    #: True when a change can move the memory peak (the engine predicts it before applying it).
    affects_memory: bool = True
    #: (other setting, value) pairs this one matters under (a chunk size only when the backend chunks);
    #: ``plan`` does not vary it otherwise.
    requires: tuple = ()
    #: True when ``minimum`` itself is not allowed (a learning rate must be above 0, not at it).
    minimum_exclusive: bool = False
    #: True when a change leaves the loss trajectory as it was (a kernel, a memory-for-compute trade); False when
    #: it changes what is trained on (a sequence length): autotune varies it only when asked to by name.
    keeps_math: bool = True
    #: False when the batches do not depend on it (a kernel or a memory trade inside the model): data worker
    #: processes keep running through a change. True (the safe default): they restart from the changed task.
    affects_data: bool = True
    #: Who takes a change: ``task`` (its ``apply_setting``; every setting a task declares), or for the engine's own
    #: ``step`` (the batch and its accumulation the loop reads), ``optimizer`` (the peak LR), ``batch_source``
    #: (threads and data workers, which the batch source follows) or ``config`` (read from the config only).
    applies: Literal["task", "step", "optimizer", "batch_source", "config"] = "task"
    #: The values autotune tries: ``choices`` (the declared ones, within the bounds), ``micro_batches`` (grad_accum:
    #: powers of two of micro-batches per rank, where the task's accumulation is exact), ``cores`` (powers of two
    #: up to the usable cores), ``workers`` (planned, one thread, 1 … min(cores, 4) processes), or "" (never tried).
    autotune: Literal["choices", "micro_batches", "cores", "workers", ""] = "choices"
    #: False for a setting the tune modal does not list (the engine's threads and workers: the plan chooses them,
    #: autotune measures them; a ``set`` still reaches them).
    tune_modal: bool = True
    #: True when this machine bounds it too: at most one per core the engine may use (more only oversubscribe
    #: them). A return to the value the run started with is never refused.
    per_core: bool = False
    #: Another setting whose value in force bounds this one from above (grad_accum: at most the batch size).
    at_most: str = ""

    def check(self, value: Any) -> str | None:
        """None when ``value`` is allowed, else the one-line reason (which names the allowed range)."""
        return self.admit(value)[1]

    def admit(self, value: Any) -> tuple[Any, str | None]:
        """(``value`` as this setting holds it, None) when it is allowed: an integer's as int, a float's as float,
        a choice as the declared choice; else (``value``, the one-line reason, which names the allowed range).
        The one check of a live value (engine.core.live_table): the engine's door, and the tune modal's field."""
        if self.kind == "choice":
            # a flag takes only true or false: 1 == True, but 1 is not the flag's value
            same = [c for c in self.choices if c == value and isinstance(c, bool) == isinstance(value, bool)]
            return (same[0], None) if same else \
                (value, f"{self.name} {value!r}; allowed: {', '.join(map(str, self.choices))}")
        # an int is compared as it is: a 400-digit one overflows float() (OverflowError, not a refusal)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                (isinstance(value, float) and not (math.isfinite(value) and (self.kind == "float"
                                                                              or value.is_integer()))):
            return value, (f"{self.name} must be {'an integer' if self.kind == 'int' else 'a finite number'} in "
                           f"{self.range_text()}, got {value!r}")
        low = self.minimum is not None and (value <= self.minimum if self.minimum_exclusive else value < self.minimum)
        if low or (self.maximum is not None and value > self.maximum):
            return value, f"{self.name} {_show(value)} is out of range; allowed: {self.range_text()}"
        return (int(value) if self.kind == "int" else float(value)), None

    def range_text(self) -> str:
        """The allowed values in a few characters, as the tune modal shows them: "1..4096", ">0..10", "fast|exact"."""
        if self.kind == "choice":
            return "|".join(map(str, self.choices))
        low = "" if self.minimum is None else (">" if self.minimum_exclusive else "") + _show(self.minimum)
        high = "" if self.maximum is None else _show(self.maximum)
        return f"{low}..{high}"

    def declaration_error(self) -> str | None:
        """Why this declaration cannot bound a live value (None when it can): a number needs finite bounds."""
        if not isinstance(self.name, str) or not isinstance(self.path, str) or \
                self.kind not in ("int", "float", "choice"):
            return f"setting {self.name!r:.40}: name and path must be strings, kind one of int, float, choice"
        if self.kind == "choice":
            return None if self.choices else f"setting {self.name!r}: a choice needs its choices"
        bounds = (self.minimum, self.maximum)
        if any(b is None or isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b)
               for b in bounds):
            return f"setting {self.name!r}: kind {self.kind!r} needs a finite minimum and maximum, got {bounds}"
        if self.minimum > self.maximum:
            return f"setting {self.name!r}: minimum {self.minimum:g} is above maximum {self.maximum:g}"
        return None


def _show(number: float) -> str:
    """A bound or a value as a person writes it: 1000000 (not 1e+06), 0.001, 1e+308."""
    if isinstance(number, int) and abs(number) >= 10 ** 15:  # past float's range too: its digits, shortened
        digits = str(abs(number))
        return f"{'-' if number < 0 else ''}{digits[0]}.{digits[1:4]}e+{len(digits) - 1}"
    return str(int(number)) if float(number).is_integer() and abs(number) < 1e15 else f"{number:g}"


@dataclass(frozen=True)
class Capabilities:
    """Everything a core or a viewer may know about a task without importing it."""

    primary: Metric
    #: Other curves worth plotting: loss components (kind "train") and validation metrics (kind "val").
    curves: tuple[Metric, ...] = ()
    #: Settings that may change live, beside the engine's own (engine.core.live_table, which lists both as one).
    settings: tuple[Setting, ...] = ()
    #: "analytic" when the spec names an analytic memory model, else "traced".
    memory: Literal["analytic", "traced"] = "traced"
    #: Artefacts besides checkpoints the task's ``export`` hook writes (e.g. "peft_adapter").
    exports: tuple[str, ...] = ()
    eval_reduction: Reduction = "per_batch"
    #: Why no setting may change while the run trains, in one line the tune modal shows instead of asking for
    #: predictions (a run whose loop another framework owns: engine.app.integrations); empty when they may.
    settings_locked: str = ""
    #: True when a step's loss over grad_accum micro-batches equals the whole batch's up to float order (means of
    #: per-sample or per-token losses); False when the loss couples the samples of a batch (a contrastive loss sees
    #: only its micro-batch's negatives): autotune then keeps the micro-batch unless asked to vary it by name.
    exact_accumulation: bool = True

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form, as carried by RunStarted.capabilities."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "Capabilities":
        """Rebuild from ``to_dict`` output; unknown keys ignored, so an older viewer reads a newer run."""
        data = dict(data or {})

        def metric(d: Mapping[str, Any]) -> Metric:
            kw = {k: v for k, v in d.items() if k in Metric.__dataclass_fields__}
            kw["guides"] = tuple((str(label), str(name)) for label, name in kw.get("guides", ()))
            return Metric(**kw)

        def setting(d: Mapping[str, Any]) -> Setting:
            kw = {k: v for k, v in d.items() if k in Setting.__dataclass_fields__}
            kw["choices"] = tuple(kw.get("choices", ()))
            kw["requires"] = tuple(tuple(pair) for pair in kw.get("requires", ()))
            return Setting(**kw)

        primary = metric(data.get("primary") or {"name": "val_loss", "label": "val loss",
                                                  "higher_is_better": False})
        return cls(primary=primary,
                   curves=tuple(metric(m) for m in data.get("curves", ())),
                   settings=tuple(setting(s) for s in data.get("settings", ())),
                   memory=data.get("memory", "traced"),
                   exports=tuple(data.get("exports", ())),
                   eval_reduction=data.get("eval_reduction", "per_batch"),
                   settings_locked=str(data.get("settings_locked") or ""),
                   exact_accumulation=bool(data.get("exact_accumulation", True)))

    def setting(self, name: str) -> Setting | None:
        """The live setting called ``name``, if the task declares it."""
        return next((s for s in self.settings if s.name == name), None)


@dataclass(frozen=True)
class TaskSpec:
    """A task as the registry sees it: name, config section, presets, capabilities, and where its code is."""

    name: str
    #: The pydantic model of the task's own config section, ``[<name>]`` in TOML (torch-free).
    config: type
    capabilities: Capabilities
    #: "module:Class" of the Task subclass (imports torch; loaded only to train, trace or export).
    task: str
    #: preset name -> overrides, keyed like the TOML file: shared sections ("train", "data", …) and ``name``.
    presets: Mapping[str, dict] = field(default_factory=dict)
    default_preset: str = "demo"
    #: "module:function" of an analytic memory model, or None (the budget traces the task instead).
    analytic_memory: str | None = None
    #: "module:function(config) -> int": the model's parameter count for `presets` when the task has no analytic
    #: memory model (whose weights term is the count); it may import torch. None: `presets` shows "–".
    param_count: str | None = None
    #: One line for `presets` and the README.
    summary: str = ""
