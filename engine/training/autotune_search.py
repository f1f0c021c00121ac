"""Autotune's search: which settings to measure next, from what was measured so far. Pure Python, no torch.

Coordinate descent over the space's dimensions (engine.training.autotune_space),
starting from the settings in force, which are measured first (the baseline a
candidate must beat). Each dimension is swept in its order (the micro-batch
largest first, i.e. by the predicted peak, highest that fits first; a task's
choices in their declared fastest-first order), one value at a time with the
others at the best so far. A candidate the budget predicts not to fit is
skipped before it is ever applied (``fits``), and so is one whose ``requires``
the best so far does not meet (a chunk size under a backend that does not
chunk). A choice that does not fit at the best micro-batch is tried at the
nearest smaller one that fits instead (``_repaired``): turning activation
checkpointing off wins only where the micro-batch shrinks with it.

What "better" means: a candidate replaces the best when its rate beats it by
more than the noise of both measurements (``Measure.noise``, the rate's
relative spread), so a change that only looks faster on a noisy box is not
taken; a choice not far behind it (``Measure.far_behind``) takes its place
when it is predicted to need less memory (``peak``), since the room it leaves
is a larger micro-batch the next pass can try (the result is still the
fastest measured, should that room not pay). Where it stops: an ordered dimension
(``Dimension.ordered``: the micro-batch, the thread count) is swept outward
from the best value, one direction at a time; once two values in a row are
slower than the best by more than the noise, or one is far behind
(``Measure.far_behind``), the rest of that direction is taken to be unable to
win and is not measured (the rate of a size or a count rises to one peak and
falls past it), and when the first direction moved the best, the second is
not swept at all (it lies past the value that lost). After a pass that changed nothing, nothing
remains to try; at most ``passes`` passes, never more than ``limit``
candidates measured.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Dimension:
    """One setting the search varies: its values in search order, and what they matter under."""

    name: str
    values: tuple
    #: (other setting, value) pairs this one matters under (a chunk size only when the backend chunks).
    requires: tuple = ()
    #: True when the values lie along one direction (sizes, counts): the sweep may stop early.
    ordered: bool = False

    def applies(self, settings: dict) -> bool:
        """True when ``settings`` meet this dimension's requirements."""
        return all(settings.get(name) == value for name, value in self.requires)


@dataclass(frozen=True)
class Measure:
    """What a window of steps measured: the rate (samples or tokens a second) and its relative noise."""

    rate: float
    noise: float

    def beats(self, other: "Measure") -> bool:
        """Faster than ``other`` by more than either measurement's noise."""
        return self.rate > other.rate * (1.0 + max(self.noise, other.noise))

    def loses_to(self, other: "Measure") -> bool:
        """Slower than ``other`` by more than either measurement's noise."""
        return self.rate * (1.0 + max(self.noise, other.noise)) < other.rate

    def far_behind(self, other: "Measure") -> bool:
        """Slower than ``other`` by more than twice the noise and 10 % besides: no noise explains it."""
        return self.rate * (1.0 + 2 * max(self.noise, other.noise)) < other.rate * (1.0 - FAR_MARGIN)


#: The margin beyond the noise that makes one measurement far behind another (``Measure.far_behind``).
FAR_MARGIN = 0.10


def key(settings: dict) -> tuple:
    """A hashable form of a settings dict (the same settings in any order give the same key)."""
    return tuple(sorted((name, repr(value)) for name, value in settings.items()))


class CoordinateSearch:
    """See the module docstring. ``next()`` gives the settings to measure (None when done), ``record`` its result."""

    def __init__(self, dims: list[Dimension], start: dict, fits: Callable[[dict], bool], limit: int,
                 passes: int = 2, peak: Callable[[dict], int | None] | None = None) -> None:
        self.dims, self.fits, self.limit, self.passes = dims, fits, limit, passes
        self.peak = peak or (lambda settings: None)
        self.start = dict(start)
        self.best: dict = dict(start)
        self.best_measure: Measure | None = None
        self.measured: dict[tuple, Measure] = {}
        #: Candidates the budget ruled out as the search came to them (never applied).
        self.refused = 0
        #: Values a sweep left unmeasured because they could not win by more than the noise.
        self.pruned = 0
        self._pass, self._dim, self._changed = 0, -1, False
        self._runs: list[list] = []  # the current dimension's values still to try, in runs (module docstring)
        self._losses = 0
        self._origin: Any = None  # the value the current dimension's sweep started from
        self._settings: dict[tuple, dict] = {}  # each measured key's settings

    def next(self) -> dict | None:
        """The settings to measure next, or None when the search is over."""
        if self.best_measure is None and key(self.start) not in self.measured:
            return dict(self.start)
        if len(self.measured) >= self.limit:
            return None
        while self._pass < self.passes:
            candidate = self._advance()
            if candidate is not None:
                return candidate
            if not self._changed:
                return None
            self._pass, self._dim, self._changed, self._runs = self._pass + 1, -1, False, []
        return None

    def _advance(self) -> dict | None:
        """The next candidate of this pass worth measuring (None when the pass is over)."""
        while True:
            while self._runs and not self._runs[0]:
                self._runs.pop(0)
                self._losses = 0
                dim = self.dims[self._dim]
                if self._runs and dim.ordered and self.best.get(dim.name) != self._origin:
                    # the first run moved the best away from where the sweep began, so the value there lost to
                    # it: past that value, on the other side, a rate with one peak only falls further
                    self.pruned += len(self._runs[0])
                    self._runs[0] = []
            if not self._runs:
                self._dim += 1
                if self._dim >= len(self.dims):
                    return None
                self._origin = self.best.get(self.dims[self._dim].name)
                self._runs = self._sweep(self.dims[self._dim])
                continue
            dim = self.dims[self._dim]
            candidate = {**self.best, dim.name: self._runs[0].pop(0)}
            if key(candidate) in self.measured:
                continue
            if not self.fits(candidate):
                self.refused += 1
                repaired = None if dim.ordered else self._repaired(candidate, dim)
                if repaired is not None:
                    return repaired
                continue
            return candidate

    def _repaired(self, candidate: dict, swept: Dimension) -> dict | None:
        """The nearest candidate that fits with ``swept``'s value kept: an ordered dimension moved toward the back
        of its values (the lower predicted peak: a smaller micro-batch), the first that fits; None when none does
        or the nearest was measured already.

        Why: a choice that trades memory for speed (activation checkpointing off, a faster kernel) often does
        not fit at the best micro-batch so far, but does one step smaller, and wins there. Coordinate descent
        alone never sees it, since the move changes two settings at once."""
        for dim in self.dims:
            if dim is swept or not dim.ordered or not dim.applies(candidate) or candidate.get(dim.name) \
                    not in dim.values:
                continue
            for value in dim.values[dim.values.index(candidate[dim.name]) + 1:]:
                moved = {**candidate, dim.name: value}
                if key(moved) in self.measured:
                    break
                if self.fits(moved):
                    return moved
        return None

    def _sweep(self, dim: Dimension) -> list[list]:
        """The values to try in ``dim`` from the best so far, as runs: all of a choice in its order; for an ordered
        dimension, outward from the current value, first toward the front of ``values`` (the higher predicted
        peak), then toward the back, each run nearest first, so a run can stop where it stops winning."""
        if not dim.applies(self.best):
            return []
        current = self.best.get(dim.name)
        if not dim.ordered or current not in dim.values:
            return [[v for v in dim.values if v != current]]
        i = dim.values.index(current)
        return [list(reversed(dim.values[:i])), list(dim.values[i + 1:])]

    def record(self, settings: dict, measure: Measure) -> str:
        """Record a measurement; why it is the new best ("" when it is not): the first measured (the rate to
        beat), faster beyond the noise, or as fast within the noise and lighter (the module docstring says why
        that wins; the line a user reads must say it, or a slower candidate called the best reads as a bug)."""
        self.measured[key(settings)] = measure
        self._settings[key(settings)] = dict(settings)
        if self.best_measure is None:
            self.best, self.best_measure = dict(settings), measure
            return "the first measured, the rate to beat"
        dim = self.dims[self._dim] if 0 <= self._dim < len(self.dims) else None
        lighter = dim is not None and not dim.ordered and not measure.far_behind(self.best_measure) \
            and self._lighter(settings)  # a choice only: along a size, ties would drift a noise at a time
        why = "faster beyond the noise" if measure.beats(self.best_measure) else self._why_lighter(settings, measure) \
            if lighter else ""
        if why:
            self.best, self.best_measure, self._changed, self._losses = dict(settings), measure, True, 0
            return why
        if dim is not None and dim.ordered and self._runs:
            self._losses = self._losses + 1 if measure.loses_to(self.best_measure) else 0
            # two in a row slower, or one far behind: further along this run cannot win
            if self._losses >= 2 or measure.far_behind(self.best_measure):
                self.pruned += len(self._runs[0])
                self._runs[0] = []
        return ""

    def _why_lighter(self, settings: dict, measure: Measure) -> str:
        """"same speed within the noise (-2 % against ±5 %), 12.0 MiB less memory" for a lighter choice."""
        from engine.core.fmt import human

        change = measure.rate / self.best_measure.rate - 1 if self.best_measure.rate else 0.0
        noise = max(measure.noise, self.best_measure.noise)
        saved = self.peak(self.best) - self.peak(settings)
        return f"same speed within the noise ({change:+.0%} against ±{noise:.0%}), {human(saved)} less memory"

    def _lighter(self, settings: dict) -> bool:
        """True when ``settings`` are predicted to need less memory than the best: not far behind it (``record``),
        they take its place, because the room they leave is a larger micro-batch the next pass can try (a kernel
        that keeps less, at about the same speed)."""
        mine, best = self.peak(settings), self.peak(self.best)
        return mine is not None and best is not None and mine < best

    def result(self) -> tuple[dict, Measure | None]:
        """The best settings and their measurement: where the search ended, unless a candidate measured on the way
        beats it beyond the noise (a lighter choice it moved to, whose room did not pay)."""
        fastest = max(self.measured.items(), key=lambda item: item[1].rate, default=None)
        if fastest is not None and self.best_measure is not None and fastest[1].beats(self.best_measure):
            return dict(self._settings[fastest[0]]), fastest[1]
        return dict(self.best), self.best_measure


def differs(a: dict, b: dict) -> dict[str, Any]:
    """The settings of ``b`` whose values differ from ``a``'s (in ``b``'s order)."""
    return {name: value for name, value in b.items() if a.get(name) != value}


def settled(times: list[tuple[float, float]]) -> bool:
    """False when a window's first half is clearly slower than its second: still warming up (True under 4 steps,
    which cannot tell)."""
    if len(times) < 4:
        return True
    half = len(times) // 2
    first, second = statistics.fmean(s for s, _ in times[:half]), statistics.fmean(s for s, _ in times[half:])
    return first <= second * (1 + max(0.15, 2 * noise([s for s, _ in times[half:]])))


def noise(seconds: list[float]) -> float:
    """The relative 95 % half-width of the mean of ``seconds`` (two standard errors over the mean)."""
    if len(seconds) < 2:
        return 1.0
    mean = statistics.fmean(seconds)
    return 2 * statistics.stdev(seconds) / (mean * math.sqrt(len(seconds))) if mean > 0 else 1.0
