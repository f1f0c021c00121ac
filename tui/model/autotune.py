"""What a viewer knows of the run's autotune: the search running (or the last one) and its table.

Folded from AutotuneStarted / AutotuneCandidate / AutotuneChose (engine.run.autotune_events);
the autotune modal draws ``rows()`` and ``headline()``. Textual-free.
"""

from __future__ import annotations

from engine.core.fmt import number
from engine.run import events as ev
from engine.run.autotune_events import settings_text
from tui.model.format import human_bytes

#: The table's columns, in order; the rate column is named by the search's unit (``AutotuneState.columns``).
COLUMNS = ("#", "candidate", "predicted", "measured", "rate", "steps/s", "noise", "")
#: The narrow table's column labels.
SHORT = {"predicted": "pred", "measured": "meas", "tokens/s": "tok/s", "samples/s": "sa/s", "steps/s": "it/s",
         "noise": "±"}
#: Between two settings of a candidate (engine.run.autotune_events.settings_text): the autotune modal breaks a cell
#: there when its column is narrow.
SEP = " · "


class AutotuneState:
    """The newest search: its start, each measured candidate, its end (None while it runs)."""

    def __init__(self) -> None:
        self.started: ev.AutotuneStarted | None = None
        self.candidates: list[ev.AutotuneCandidate] = []
        self.chose: ev.AutotuneChose | None = None

    @property
    def active(self) -> bool:
        """True while a search runs (started, not yet ended)."""
        return self.started is not None and self.chose is None

    @property
    def unit(self) -> str:
        """What the rates count (samples/s or tokens/s)."""
        return self.started.unit if self.started else "samples/s"

    def columns(self, short: bool = False) -> tuple[str, ...]:
        """COLUMNS with the rate column named by what it counts ("tokens/s"); ``short``: the narrow table's
        labels ("pred", "meas", "tok/s", "it/s", "±"), whose values are as wide as before."""
        names = tuple(self.unit if c == "rate" else c for c in COLUMNS)
        return tuple(SHORT.get(c, c) for c in names) if short else names

    def fold(self, event: ev.Event) -> str:
        """Take one autotune event in; the line the log shows for it."""
        if isinstance(event, ev.AutotuneStarted):
            self.started, self.candidates, self.chose = event, [], None
            return (f"autotune started ({event.reason}): {event.candidates} combinations fit, {event.refused} "
                    f"predicted not to fit (never tried); {self.start_text() or 'start: as running'}")
        if isinstance(event, ev.AutotuneCandidate):
            self.candidates.append(event)
            why = f": {event.why}" if event.why else ""
            return (f"autotune: {self.varied(event.settings)} {number(event.rate)} {self.unit} "
                    f"±{event.noise:.0%}{f' (best so far{why})' if event.best else ''}")
        if isinstance(event, ev.AutotuneChose):
            self.chose = event
            return f"autotune {event.status}: {settings_text(event.settings)}" + self._gain(event)
        return ""

    def varied(self, settings: dict) -> str:
        """The settings that differ from the search's start ("kernel_block 512 · threads 1"), "start" for the start
        itself; every setting when the start is not known. The start is said once, by ``start_text``."""
        start = self.started.start if self.started is not None else None
        if not start:
            return settings_text(settings)
        changed = {name: value for name, value in settings.items() if start.get(name, value) != value or
                   name not in start}
        return settings_text(changed) if changed else "start"

    def start_text(self) -> str:
        """"start: grad_accum 16 · kernel fused": what every candidate is compared with ("" before a search)."""
        return f"start: {settings_text(self.started.start)}" if self.started is not None and self.started.start else ""

    def rows(self) -> list[tuple[str, ...]]:
        """One row a candidate: COLUMNS' cells, the candidate as what it changes from the start (``varied``), the
        chosen one marked once the search ended."""
        chosen = self.chose.settings if self.chose is not None and self.chose.status != "stopped" else None
        out = []
        for i, c in enumerate(self.candidates, 1):
            mark = "chosen" if chosen is not None and c.settings == chosen else ("best" if c.best else "")
            rate = number(c.rate) if c.steps else "not measured"
            out.append((str(i), self.varied(c.settings), human_bytes(c.predicted), human_bytes(c.measured), rate,
                        f"{c.steps_per_s:.3g}", f"±{c.noise:.0%}", mark))
        return out

    def headline(self) -> str:
        """One line: what the search varies and what the budget ruled out, or how it ended."""
        if self.started is None:
            return "no autotune yet"
        s = self.started
        if self.chose is not None:
            c = self.chose
            ended = {"chosen": "chosen", "kept": "kept the start (nothing beat it beyond the noise)",
                     "cancelled": "cancelled: the settings before it restored", "stopped": "stopped"}.get(c.status)
            why = f" ({c.reason})" if c.reason else ""
            varied = self.varied(c.settings)  # kept, cancelled: the start, in full
            what = varied if varied != "start" else settings_text(c.settings)
            return f"{ended}: {what}{self._gain(c)}{why} · {c.seconds:.1f} s"
        space = " · ".join(f"{name} {'|'.join(map(str, values))}" for name, values in s.space.items())
        return (f"searching from step {s.step}: {s.candidates} combinations fit, {s.refused} predicted not to fit "
                f"(never tried) · {space}")

    def _gain(self, chose: ev.AutotuneChose) -> str:
        if chose.rate and chose.start_rate:
            return f", {number(chose.rate)} {self.unit} (x{chose.rate / chose.start_rate:.2f} the start)"
        return ""
