"""The run's per-step values as the dashboard names them: a source, its chartable series, the newest step.

The source is the run's step record once the session worker opened it (tui.model.step_source.RecordSteps),
else the step events themselves held in memory (MemorySteps: a session without a record). Nothing here holds
a value per step of a record: a chart asks the source for the envelope and window it draws, and following a
live run is ``refresh`` (what was appended). The names are the dashboard's: ``loss``, then the loss components
by their own names and any other series, then the step fields that carry a value (grad norm, LR, throughput).

After rows arrive (``refresh``, ``append_events``), ``latest`` gives the newest step as a StepLogged (the
progress panel's line, the settings' current batch size and LR) and the pace samples of the rows added
(engine.run.pace, for tui.model.rates). Torch- and Textual-free.
"""

from __future__ import annotations

import numpy as np

from engine.run import events as ev
from engine.run.steps import Envelope
from tui.model.rates import RATE_WINDOW, pace_samples
from tui.model.step_source import (
    CHART_FIELDS,
    NOT_CHARTED,
    ZERO_UNKNOWN,
    MemorySteps,
    RecordSteps,
    chart_name,
    record_name,
)

#: StepLogged's numeric fields, as the record stores them.
STEP_FIELDS = ("t", "epoch", "loss", "lr", "grad_norm", "samples_per_s", "steps_per_s", "batch_size", "skipped",
               "tokens_per_s", "mfu")


def number(value) -> float:
    """A logged number as a float; NaN for None or anything else."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else np.nan


def event_columns(events: list[ev.StepLogged]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(steps, {record name: values}) of a batch of step events: the StepLogged fields and ``components.<name>``."""
    n = len(events)
    steps = np.fromiter((e.step for e in events), np.int64, n)
    columns = {name: np.fromiter((number(getattr(e, name, None)) for e in events), np.float64, n)
               for name in STEP_FIELDS}
    columns["skipped"] = np.fromiter((float(bool(e.skipped)) for e in events), np.float64, n)
    components = dict.fromkeys(k for e in events for k in (e.components or {}))
    for key in components:
        columns["components." + key] = np.fromiter((number((e.components or {}).get(key)) for e in events),
                                                   np.float64, n)
    return steps, columns


class StepSeries:
    """The step source and what the dashboard reads of it (module docstring)."""

    def __init__(self) -> None:
        self.source: RecordSteps | MemorySteps = MemorySteps()
        self._names: dict[str, str] = {}  # dashboard name → record name, in the order shown
        self._names_key: tuple | None = None
        self._raw_names: set[str] = set()
        self._known_at: tuple | None = None
        self._known: set[str] = set()  # step fields seen with a value (ZERO_UNKNOWN: a positive one)
        self._checked: dict[str, int] = {}  # the last step each field not known yet was looked at up to
        self._last_event: ev.StepLogged | None = None  # the newest step event, when the source is memory
        self._seen_step: int | None = None  # the newest step ``latest`` reported

    # ------------------------------------------------------------------ the source
    @property
    def from_record(self) -> bool:
        """True once the run's step record is the source."""
        return isinstance(self.source, RecordSteps)

    def use(self, source: RecordSteps) -> None:
        """Read from the run's step record from now on (what memory held is dropped: the record has it all)."""
        self.source, self._names_key, self._known, self._last_event, self._seen_step = source, None, set(), None, None
        self._known_at, self._checked = None, {}

    def refresh(self) -> bool:
        """Take in what the record gained since the last look; True when anything changed."""
        return self.source.refresh()

    def append_events(self, events: list[ev.StepLogged]) -> None:
        """Step events into a memory source (a record source has them already: they are ignored)."""
        if self.from_record or not events:
            return
        steps, columns = event_columns(events)
        self.source.append(steps, columns)
        self._last_event = events[-1]

    def append_columns(self, steps: np.ndarray, columns: dict[str, np.ndarray], last: ev.StepLogged) -> None:
        """A log's step columns (engine.run.history.History) into a memory source; ``last`` its newest step."""
        if self.from_record or not len(steps):
            return
        self.source.append(steps, columns)
        self._last_event = last

    @property
    def empty(self) -> bool:
        """True before any step."""
        return not self.source.rows

    # ------------------------------------------------------------------ names
    def names(self) -> list[str]:
        """Series a chart may show: loss first, then the components and any other series, then the step fields
        that carry a value (grad norm, LR, throughput)."""
        return list(self.chart_names())

    def chart_names(self) -> dict[str, str]:
        """Dashboard name → the source's name, in the order shown (cached; do not change it)."""
        raw = self.source.names()
        if self._known_at != (id(self.source), self.source.rows):
            self._known_at = (id(self.source), self.source.rows)
            self._check_known(raw)
        key = (id(self.source), len(raw), len(self._known))
        if key == self._names_key:
            return self._names
        names = {"loss": "loss"} if "loss" in raw else {}
        for name in raw:
            if name not in CHART_FIELDS and name not in NOT_CHARTED and name != "loss":
                names.setdefault(chart_name(name), name)
        for name in CHART_FIELDS:
            if name in self._known:
                names.setdefault(name, name)
        self._names, self._names_key, self._raw_names = names, key, set(raw)
        return names

    def _check_known(self, raw: list[str]) -> None:
        """Step fields with a value (a run that does not measure grad norm logs NaN; tokens/s and MFU 0), looked
        for in the steps not looked at yet."""
        for name in CHART_FIELDS:
            if name in self._known or name not in raw:
                continue
            span = self.source.bounds(name)
            if span is None:
                continue
            first = max(span[0], self._checked.get(name, span[0] - 1) + 1)
            if first > span[1]:
                continue
            seen = self.source.envelope(name, first, span[1], 1)
            self._checked[name] = span[1]
            if seen.finite[0] and (name not in ZERO_UNKNOWN or seen.max[0] > 0):
                self._known.add(name)

    def record_name(self, name: str) -> str | None:
        """The source's name of the dashboard's ``name`` (None: no such series)."""
        names = self.chart_names()
        return names.get(name) or record_name(name, self._raw_names)

    def has(self, name: str) -> bool:
        """True when ``name`` is a series a chart may show."""
        return name in self.chart_names()

    # ------------------------------------------------------------------ reading, by the dashboard's names
    def bounds(self, name: str) -> tuple[int, int] | None:
        """First and last step of ``name`` (None when it has none)."""
        raw = self.record_name(name)
        return None if raw is None else self.source.bounds(raw)

    def envelope(self, name: str, step_lo: int, step_hi: int, columns: int) -> Envelope | None:
        """Per column of [step_lo, step_hi]: exact min / max / last, and the mean (None: no such series)."""
        raw = self.record_name(name)
        return None if raw is None else self.source.envelope(raw, step_lo, step_hi, columns)

    def window(self, name: str, step_lo: int, step_hi: int) -> tuple[np.ndarray, np.ndarray]:
        """Raw (steps, values) of ``name`` in [step_lo, step_hi] (empty when it has none)."""
        raw = self.record_name(name)
        return (np.zeros(0, np.int64), np.zeros(0)) if raw is None else self.source.window(raw, step_lo, step_hi)

    def before(self, name: str, step: int, count: int) -> tuple[np.ndarray, np.ndarray, int]:
        """The last ``count`` values of ``name`` before ``step``, and how many values precede them."""
        raw = self.record_name(name)
        return (np.zeros(0, np.int64), np.zeros(0), 0) if raw is None else self.source.before(raw, step, count)

    # ------------------------------------------------------------------ the newest step
    def latest(self) -> tuple[ev.StepLogged | None, tuple[float, int] | None, list]:
        """(the newest step as an event, the source's first (t, step), the pace samples (engine.run.pace) of the rows
        added since the last call, at most RATE_WINDOW of them). Read by position: the newest rows, the first."""
        last = self.source.last_step
        if last is None:
            return None, None, []
        since = self._seen_step if self._seen_step is not None and self._seen_step < last else None
        self._seen_step = last
        names = self.source.names()
        if "t" not in names:
            return self._last_event or self._row_event(), None, []
        steps, t = self.source.tail("t", RATE_WINDOW)
        rates = [self.source.tail(name, RATE_WINDOW)[1] if name in names else np.full(len(t), np.nan)
                 for name in ("samples_per_s", "steps_per_s", "tokens_per_s")]
        if any(len(r) != len(t) for r in rates):  # (a field that started late): its tail is not these rows'
            rates = [r if len(r) == len(t) else np.full(len(t), np.nan) for r in rates]
        recent = [s for s in pace_samples(t, steps, *rates) if since is None or s[1] > since]
        head = self.source.head("t")
        first = (head[1], head[0]) if head is not None else None
        return self._last_event or self._row_event(), first, recent

    def _row_event(self) -> ev.StepLogged:
        """The record's newest row as a StepLogged (its fields; components are not read: nothing shows them)."""
        row = self.source.last_values(list(STEP_FIELDS))
        body = {name: row[name] for name in STEP_FIELDS if name in row}
        for name in ("epoch", "batch_size"):
            body[name] = int(body.get(name, 0))
        body["skipped"] = bool(body.get("skipped", 0))
        return ev.StepLogged(step=int(self.source.last_step), **body)

