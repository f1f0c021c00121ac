"""Typed training events: frozen dataclasses of plain Python values, and their JSON form.

Every event the engine emits is one of the dataclasses below or of a group beside this module
(engine.run.autotune_events), on the base engine.run.event_base.Event. On disk
(``events.jsonl``) an event is one JSON object a line with a ``type`` field
and the event's fields; the first line of a file is a ``Schema`` record so a
newer viewer can read an older run. Unknown fields in a record are ignored and
missing ones take their defaults, which is what lets the schema grow.

Torch-free by design: tensors never travel in events.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from engine.core import migrate
from engine.core.estimate import BudgetSummary
from engine.run.autotune_events import AutotuneCandidate, AutotuneChose, AutotuneStarted
from engine.run.event_base import Event

#: Version of the event schema written in the first record of events.jsonl. 2: EvalDone carries ``metrics`` and
#: ``primary`` only (schema 1's per-task fields are migrated on read, engine.core.migrate), RunStarted carries
#: ``capabilities`` and a typed ``budget``. 3: every step is in the run's step record (``steps/``,
#: engine.run.steps) and the log may hold step lines only at a cadence; a log of schema ≤ 2 holds every step,
#: and its record is converted from it once (engine.run.steps.convert; migrate.STEP_RECORD_SCHEMA).
SCHEMA_VERSION = 3

#: Run states, as carried by StateChanged and the status record.
STATES = ("starting", "running", "paused", "checkpointing", "aborting", "finished", "aborted", "failed")


@dataclass(frozen=True)
class Schema(Event):
    """First record of every events.jsonl: which schema wrote the file."""

    type: ClassVar[str] = "schema"
    version: int = SCHEMA_VERSION
    writer: str = "sensorlm-tui"


@dataclass(frozen=True)
class RunStarted(Event):
    """The engine is up: resolved config, parameter count, device and the memory budget it plans with."""

    type: ClassVar[str] = "run_started"
    name: str = ""
    task: str = ""
    preset: str = ""
    config: dict = field(default_factory=dict)
    params: int = 0
    #: Parameters the optimizer trains (LoRA: the adapters only); 0 in a run of an older release.
    trainable: int = 0
    #: Training samples an epoch reads, and validation samples an evaluation reads (0: not reported).
    train_samples: int = 0
    val_samples: int = 0
    device: str = "cpu"
    device_name: str = "CPU"
    #: What the engine planned memory with (engine.core.estimate.BudgetSummary; a dict is converted).
    budget: BudgetSummary = field(default_factory=BudgetSummary)
    total_steps: int = 0
    start_step: int = 0
    resumed_from: str | None = None
    pid: int = 0
    #: The task's declared capabilities (engine.core.taskspec.Capabilities.to_dict()): primary metric, curves,
    #: live settings, memory model, exports. Viewers are driven by this, never by the task's name.
    capabilities: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.budget, BudgetSummary):  # from JSON (or an older caller): a plain dict
            object.__setattr__(self, "budget", BudgetSummary.from_dict(self.budget))


@dataclass(frozen=True)
class StepLogged(Event):
    """One optimizer step finished (or was skipped, ``skipped=True``, on a non-finite loss/grad)."""

    type: ClassVar[str] = "step"
    step: int = 0
    epoch: int = 0
    loss: float = float("nan")
    lr: float = 0.0
    grad_norm: float = float("nan")
    samples_per_s: float = 0.0
    steps_per_s: float = 0.0
    batch_size: int = 0
    components: dict = field(default_factory=dict)
    skipped: bool = False
    #: Tokens a second, for a task that counts tokens (engine.training.throughput); 0 otherwise.
    tokens_per_s: float = 0.0
    #: Model FLOPs utilisation, a fraction of the device's dense bf16 peak; 0 when unknown (CPU, no FLOP count).
    mfu: float = 0.0


@dataclass(frozen=True)
class EvalDone(Event):
    """A validation pass: every metric the task reported (``metrics``, val_loss included), which is primary.

    Schema-1 records (a fixed metric field and ``extra`` instead of ``metrics``) are migrated on read
    (engine.core.migrate).
    """

    type: ClassVar[str] = "eval"
    step: int = 0
    val_loss: float = float("nan")
    #: Every validation metric by name (val_loss included), reduced over the whole validation set.
    metrics: dict = field(default_factory=dict)
    #: Name of the task's primary metric (a key of ``metrics``); ``best`` is its best value so far.
    primary: str = ""
    best: float | None = None
    is_best: bool = False
    seconds: float = 0.0


@dataclass(frozen=True)
class MemorySampled(Event):
    """Measured device memory next to the prediction and the budget (bytes; None where not measurable)."""

    type: ClassVar[str] = "memory"
    step: int = 0
    device: str = "cpu"
    allocated: int | None = None
    reserved: int | None = None
    peak: int | None = None
    nvml_used: int | None = None
    capacity: int | None = None
    predicted: int | None = None
    budget: int | None = None
    breakdown: dict = field(default_factory=dict)
    ratio: float | None = None
    source: str = ""
    #: Resident set size of the engine process (CPU samples; shown beside the peak, it is not training memory).
    rss: int | None = None
    #: The driver's reserved memory NVML (v2) lists apart from ``nvml_used``, as nvidia-smi does.
    nvml_reserved: int | None = None
    #: This process's memory outside the allocator (CUDA context, handles, kernels), measured after the
    #: first steps: ``reserved + context`` is what nvidia-smi shows for the process.
    context: int | None = None


@dataclass(frozen=True)
class SystemSampled(Event):
    """Host and GPU load: CPU %, RAM, and GPU utilisation / temperature / power where NVML answers."""

    type: ClassVar[str] = "system"
    cpu_percent: float = 0.0
    ram_used: int = 0
    ram_total: int = 0
    gpu_util: float | None = None
    gpu_temp_c: float | None = None
    gpu_power_w: float | None = None


@dataclass(frozen=True)
class CheckpointSaved(Event):
    """A checkpoint reached disk atomically; ``kind`` is last / best / step / final / manual / crash / autotune (a
    search's result, written before it is reported)."""

    type: ClassVar[str] = "checkpoint"
    step: int = 0
    path: str = ""
    kind: str = "last"
    seconds: float = 0.0
    bytes: int = 0
    digest: str = ""
    request_id: str | None = None


@dataclass(frozen=True)
class ExportWritten(Event):
    """The task's export (an adapter, a model directory) reached disk atomically; ``kind`` is final / manual."""

    type: ClassVar[str] = "export"
    step: int = 0
    path: str = ""
    kind: str = "final"
    seconds: float = 0.0


@dataclass(frozen=True)
class CheckpointFailed(Event):
    """A save failed (disk full, read-only, I/O error); the previous checkpoint is intact."""

    type: ClassVar[str] = "checkpoint_failed"
    step: int = 0
    path: str = ""
    error: str = ""


@dataclass(frozen=True)
class StateChanged(Event):
    """The run moved to another state (see STATES), with a human reason."""

    type: ClassVar[str] = "state"
    state: str = "running"
    reason: str = ""
    step: int = 0


@dataclass(frozen=True)
class SettingChanged(Event):
    """A control was applied: ``name`` changed from ``old`` to ``new``; acknowledges ``request_id``."""

    type: ClassVar[str] = "setting"
    name: str = ""
    old: Any = None
    new: Any = None
    reason: str = ""
    step: int = 0
    request_id: str | None = None


@dataclass(frozen=True)
class Refused(Event):
    """A control was refused, with the reason (e.g. predicted peak over budget); acknowledges ``request_id``."""

    type: ClassVar[str] = "refused"
    request: dict = field(default_factory=dict)
    why: str = ""
    step: int = 0
    request_id: str | None = None
    #: For a change refused by the memory budget: the predicted peak and the budget it was judged by (bytes).
    predicted: int | None = None
    budget: int | None = None


@dataclass(frozen=True)
class Prediction(Event):
    """The answer to a dry-run ``set``: the numbers the same real request would be judged by, nothing applied.

    ``refused`` is the refusal the real request would get (empty when it would
    apply); ``predicted`` and ``budget`` are the bytes the budget compared
    (None when the engine has no prediction or no budget).
    """

    type: ClassVar[str] = "prediction"
    name: str = ""
    value: Any = None
    predicted: int | None = None
    budget: int | None = None
    fits: bool = True
    refused: str = ""
    step: int = 0
    request_id: str | None = None


@dataclass(frozen=True)
class Warning(Event):  # noqa: A001 - the architecture's name; shadows the builtin only inside this module
    """Something the user should know that did not stop the run (skipped NaN step, OOM recovery, …)."""

    type: ClassVar[str] = "warning"
    text: str = ""
    step: int = 0


@dataclass(frozen=True)
class PhaseStarted(Event):
    """A start-up phase began (importing torch, building data, building the model, tracing memory, first eval).

    Viewers show the current phase with its elapsed seconds until the first step arrives.
    """

    type: ClassVar[str] = "phase"
    phase: str = ""
    detail: str = ""


@dataclass(frozen=True)
class CompileDone(Event):
    """torch.compile compiled ``frames`` functions during step ``step`` (engine.training.compile): the first
    compile (the start-up phase's ``seconds``), or recompiles, each with dynamo's reason (the guard that failed)."""

    type: ClassVar[str] = "compile"
    step: int = 0
    seconds: float = 0.0
    frames: int = 0
    recompiles: int = 0
    reasons: list = field(default_factory=list)
    total_compiles: int = 0
    total_recompiles: int = 0
    total_seconds: float = 0.0
    first: bool = False
    mode: str = ""
    backend: str = ""


@dataclass(frozen=True)
class LogLine(Event):
    """A line the training code printed (captured so it never corrupts a dashboard)."""

    type: ClassVar[str] = "log"
    text: str = ""
    stream: str = "stdout"


@dataclass(frozen=True)
class RanksSampled(Event):
    """Each rank's recent steps, gathered to rank 0 every few steps of a distributed run (engine.distributed).

    ``ranks`` holds one record per rank: rank, host, step (its own count), step_s (mean wall time a step),
    work_s (mean time until its gradients were ready to sync: its own work), data_s (mean wait for
    data), allocated/reserved (device bytes, None on CPU), rss (process bytes). ``straggler`` is the rank
    whose work_s exceeds the median by the most (None when none stands out), ``cost_s`` what it costs the
    job a step (its work_s minus the median: every other rank waits that long).
    """

    type: ClassVar[str] = "ranks"
    step: int = 0
    ranks: list = field(default_factory=list)
    straggler: int | None = None
    median_work_s: float | None = None
    cost_s: float | None = None
    #: Why it was gathered: "every" (the cadence) or "control" (a control applied on every rank at this step).
    reason: str = "every"


@dataclass(frozen=True)
class RunFinished(Event):
    """The run ended: status finished / aborted / failed / interrupted, best metric, last step, how to resume."""

    type: ClassVar[str] = "run_finished"
    status: str = "finished"
    best: float | None = None
    steps: int = 0
    reason: str = ""
    checkpoint: str | None = None
    resume_command: str | None = None
    exit_code: int = 0
    #: The export written as the run finished (ExportWritten), None when the task exports nothing.
    export: str | None = None
    #: The step ``checkpoint`` holds (None: not known, a record of an older release or of a framework's loop).
    checkpoint_step: int | None = None

    def checkpoint_said(self) -> str:
        """The checkpoint as an exit line says it: "checkpoint PATH" when it holds the last step, else that no
        checkpoint was written at the stop and the step a resume starts from ("checkpoint PATH" alone read as
        the state at the stop, though it was written steps before)."""
        if not self.checkpoint:
            return "no checkpoint"
        if self.checkpoint_step is None or self.checkpoint_step >= self.steps:
            return f"checkpoint {self.checkpoint}"
        return (f"no checkpoint at step {self.steps}; a resume starts from step {self.checkpoint_step} "
                f"({self.checkpoint})")


EVENT_TYPES: dict[str, type[Event]] = {
    cls.type: cls
    for cls in (
        Schema, RunStarted, StepLogged, EvalDone, MemorySampled, SystemSampled, CheckpointSaved, ExportWritten,
        CheckpointFailed, StateChanged, SettingChanged, Refused, Prediction, Warning, PhaseStarted, CompileDone,
        LogLine, RanksSampled, AutotuneStarted, AutotuneCandidate, AutotuneChose, RunFinished,
    )
}


def _finite_or_none(value: Any) -> Any:
    """JSON has no NaN/Inf: floats that are not finite are written as strings and read back."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return repr(value)
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    return value


#: The JSON strings events use for the floats JSON cannot spell (the history reader decodes them too).
SPECIAL_FLOATS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


def _all_finite(values: Any) -> bool:
    """True when no float in ``values`` (a record's values, nested dicts and lists) is NaN or infinite."""
    for value in values.values() if isinstance(values, dict) else values:
        kind = value.__class__
        if kind is float:
            if value - value != 0.0:  # NaN - NaN and inf - inf are NaN
                return False
        elif (kind is dict or kind is list or kind is tuple) and not _all_finite(value):
            return False
    return True


_FIELDS: dict[type, tuple[str, ...]] = {}
_ENCODE = None


def _record(event: Event) -> dict[str, Any]:
    """``event.to_dict()`` without its deep copy (json encodes the values; nothing keeps the dict)."""
    names = _FIELDS.get(event.__class__)
    if names is None:
        names = _FIELDS[event.__class__] = tuple(f.name for f in dataclasses.fields(event))
    record: dict[str, Any] = {"type": event.type}
    for name in names:
        record[name] = getattr(event, name)
    return record


def to_json(event: Event) -> str:
    """One compact JSON line (no newline) for an event; non-finite floats become "nan"/"inf".

    msgspec encodes a shallow record: ~3 µs against ~40 µs for ``dataclasses.asdict`` + ``json.dumps``,
    which at 1,000 steps/s was 4 % of the step. A record with a non-finite float (a NaN loss; the grad norm
    a run from another framework's loop does not know, on every step) has those floats turned into strings
    first and stays on the fast path. Only a value msgspec cannot write (one only ``str()`` can) takes json.
    """
    global _ENCODE
    record = _record(event)
    if _ENCODE is None:
        import msgspec

        _ENCODE = msgspec.json.Encoder().encode
    try:
        return _ENCODE(record if _all_finite(record) else _finite_or_none(record)).decode()
    except (TypeError, OverflowError):
        return json.dumps(_finite_or_none(event.to_dict()), separators=(",", ":"), default=str)


def from_dict(record: dict[str, Any]) -> Event | None:
    """Rebuild an event from its JSON form (older schemas migrated); None for a type this viewer does not know."""
    cls = EVENT_TYPES.get(record.get("type", ""))
    if cls is None:
        return None
    record = migrate.event(record)
    names = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in record.items():
        if key not in names:
            continue
        if isinstance(value, str) and value in SPECIAL_FLOATS and names[key].type in ("float", "float | None"):
            value = SPECIAL_FLOATS[value]
        kwargs[key] = value
    return cls(**kwargs)


def from_json(line: str) -> Event | None:
    """Parse one events.jsonl line; None for a torn or unknown line (a reader skips it)."""
    try:
        record = json.loads(line)
    except (ValueError, TypeError):
        return None
    if not isinstance(record, dict):
        return None
    try:
        return from_dict(record)
    except TypeError:
        return None
