"""The events of a live autotune (engine.training.autotune): a search started, a candidate measured, a choice.

Viewers show them as the search's table (candidate, predicted and measured
peak, rate, noise, chosen); ``runs`` and ``plot`` read them from events.jsonl
like any other event (engine.run.events lists them in its type table).
Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from engine.run.event_base import Event


@dataclass(frozen=True)
class AutotuneStarted(Event):
    """A search for the fastest settings that fit began: ``start`` is what a cancel restores, ``space`` the values
    searched; ``refused`` combinations were predicted not to fit the budget and are never tried."""

    type: ClassVar[str] = "autotune_started"
    step: int = 0
    reason: str = ""
    start: dict = field(default_factory=dict)
    space: dict = field(default_factory=dict)
    candidates: int = 0
    refused: int = 0
    budget: int | None = None
    #: What every ``rate`` counts: "samples/s", or "tokens/s" for a task that counts tokens.
    unit: str = "samples/s"
    #: Why some settings the task declares are not searched (they change the run's math), for the viewer.
    note: str = ""
    request_id: str | None = None


@dataclass(frozen=True)
class AutotuneCandidate(Event):
    """One candidate measured over ``steps`` real training steps after ``warmup`` untimed ones: its predicted and
    measured peak (bytes; None where not known), rate, and ``noise`` (the rate's relative spread in its window)."""

    type: ClassVar[str] = "autotune_candidate"
    step: int = 0
    settings: dict = field(default_factory=dict)
    predicted: int | None = None
    measured: int | None = None
    rate: float = 0.0
    steps_per_s: float = 0.0
    noise: float = 0.0
    steps: int = 0
    warmup: int = 0
    #: The search's best so far: the fastest beyond the noise, or a choice nearly as fast that needs less memory.
    best: bool = False
    #: Why it is the best so far ("faster beyond the noise", "same speed within the noise (…), 12.0 MiB less
    #: memory", the first measured); "" when it is not.
    why: str = ""
    #: "halfway" when the window ended at its halfway look (a steady rate, or a clear loser); "" when it ran out.
    ended: str = ""


@dataclass(frozen=True)
class AutotuneChose(Event):
    """The search ended with ``settings`` in force: ``status`` chosen (the fastest), kept (nothing beat the start
    beyond the noise) or cancelled (the start restored). ``table``: every candidate measured (its
    AutotuneCandidate fields and ``chosen``); ``ranks``: each rank's step and settings as it ended."""

    type: ClassVar[str] = "autotune_chose"
    step: int = 0
    status: str = "chosen"
    settings: dict = field(default_factory=dict)
    rate: float | None = None
    start_rate: float | None = None
    table: list = field(default_factory=list)
    seconds: float = 0.0
    ranks: list = field(default_factory=list)
    reason: str = ""
    request_id: str | None = None


def settings_text(settings: dict) -> str:
    """``grad_accum 4 · kernel fused`` (booleans as on/off)."""
    shown = {True: "on", False: "off"}
    return " · ".join(f"{name} {shown.get(value, value) if isinstance(value, bool) else value}"
                      for name, value in settings.items())


def line(event: Event, unit: str = "samples/s") -> str:
    """The one console line for an autotune event (``unit``: the search's, from its AutotuneStarted)."""
    from engine.core.fmt import human, number

    if isinstance(event, AutotuneStarted):
        space = "; ".join(f"{name} {'|'.join(map(str, values))}" for name, values in event.space.items())
        note = f" ({event.note})" if event.note else ""
        return (f"started ({event.reason}) at step {event.step}: {event.candidates} combinations fit, "
                f"{event.refused} predicted not to fit (never tried); space {space}{note}")
    if isinstance(event, AutotuneCandidate):
        best = f" (best so far: {event.why})" if event.best and event.why else " (best so far)" if event.best else ""
        return (f"{settings_text(event.settings)}: {number(event.rate, 4)} {unit} ±{event.noise:.0%} ({event.steps} "
                f"steps timed after {event.warmup}) peak {human(event.measured)} predicted {human(event.predicted)}"
                f"{best}")
    if isinstance(event, AutotuneChose):
        gain = (f", x{event.rate / event.start_rate:.2f} the start" if event.rate and event.start_rate else "")
        rate = f": {number(event.rate, 4)} {unit}{gain}" if event.rate else ""
        why = f" ({event.reason})" if event.reason else ""
        return (f"{event.status} {settings_text(event.settings)}{rate} after {len(event.table)} candidates in "
                f"{event.seconds:.1f} s{why}")
    return ""
