"""Synthetic wearable data: day windows at minute resolution, deterministic in (seed, sample index).

Every sample is generated on demand from its index, so the dataset is
unbounded and costs no disk: sample ``i`` is a pure function of
``(seed, i, channels, minutes)``. A person is a week of consecutive indices
(``person = index // 7``, ``weekday = index % 7``); each person has hidden
traits (resting and maximal heart rate, fitness, weight, habitual wake, bed and
workout times, a favourite workout) and each day jitters that habit into a
schedule of segments: sleep, sedentary (the background while awake), walk,
run, cycle, strength and commute (weekdays). Signals are derived from the
per-minute activity with first-order lags (heart rate follows effort with a
~2-minute lag, skin temperature with ~30 minutes), trait-dependent levels and
sensor noise (engine.tasks.sensorlm.signals; the channels, activities and
gaps are named in engine.tasks.sensorlm.day). Gaps hide data the way devices do: ``device_off`` blanks every
channel, ``charging`` blanks the wrist channels (physiology and motion) while
the environment sensors and the battery still report, and short optical
dropouts blank heart rate and HRV. A blank is NaN in ``values`` and False in
``valid``; captions and statistics only ever look at valid minutes.

Validation samples live in a disjoint index range (from ``VAL_OFFSET``, one person each), so
no training index can ever produce a validation day.

Cost: one 1440 × 34 day takes about a millisecond of numpy on one core
(measured in the task's report; see ``bench`` numbers in the final report).
"""

from __future__ import annotations

import numpy as np

from engine.tasks.sensorlm.day import (
    CHANNEL_INDEX,
    COMMUTE,
    CYCLE,
    RUN,
    SEDENTARY,
    SLEEP,
    STRENGTH,
    WALK,
    DaySample,
    Person,
    Segment,
    channel_list,
)
from engine.tasks.sensorlm.signals import signals

#: Validation windows are generated from global indices at and above this (training indices stay below it).
VAL_OFFSET = 1 << 40

def _rng(*key: int) -> np.random.Generator:
    # SeedSequence mixes the whole key, so (seed, tag, index) streams never collide.
    return np.random.default_rng([int(k) & 0xFFFFFFFFFFFFFFFF for k in key])


_TAG_PERSON, _TAG_DAY, _TAG_SIGNAL = 1, 2, 3


class SyntheticWearables:
    """Generator of synthetic day windows; ``sample(i)`` is a pure function of (seed, i)."""

    def __init__(self, seed: int = 0, channels: int = 32, minutes: int = 1440) -> None:
        self.seed = int(seed)
        self.channels = channel_list(channels)
        self.minutes = int(minutes)
        self._cols = [CHANNEL_INDEX[c.name] for c in self.channels]

    # -- hidden truth --------------------------------------------------------------
    def person(self, person_id: int) -> Person:
        """Traits of one person (deterministic in seed and person id)."""
        r = _rng(self.seed, _TAG_PERSON, person_id)
        fitness = float(r.beta(2.0, 2.5))
        age = float(r.uniform(20, 65))
        habit = int(r.choice([WALK, RUN, CYCLE, STRENGTH], p=[0.3, 0.3, 0.2, 0.2]))
        home = float(r.uniform(0, 900))
        return Person(
            person_id=person_id,
            resting_hr=float(np.clip(r.normal(66, 6) - 12 * fitness, 42, 90)),
            max_hr=float(208 - 0.7 * age + r.normal(0, 4)),
            fitness=fitness,
            weight_kg=float(np.clip(r.normal(74, 12), 45, 130)),
            step_length_m=float(r.uniform(0.65, 0.82)),
            wake_min=float(r.uniform(5.5 * 60, 8.0 * 60)),
            bed_min=float(r.uniform(21.5 * 60, 23.6 * 60)),
            habit=habit,
            workout_min=float(r.choice([r.uniform(6.5, 8.0), r.uniform(12.0, 13.0), r.uniform(17.5, 19.5)]) * 60),
            workout_prob=float(np.clip(0.2 + 0.7 * fitness + r.normal(0, 0.1), 0.1, 0.95)),
            skin_temp_base=float(r.normal(33.2, 0.4)),
            home_altitude=home,
            work_altitude=float(home + r.uniform(-60, 60)),
        )

    def _day_schedule(self, r: np.random.Generator, p: Person, weekday: int, offset: int) -> tuple[list[Segment], dict]:
        """Segments of one calendar day starting at window minute ``offset``; also the day's anchor times."""
        wake = int(np.clip(p.wake_min + r.normal(0, 20) + (50 if weekday >= 5 else 0), 240, 660))
        bed = int(np.clip(p.bed_min + r.normal(0, 25), 20 * 60, 1440 - 20))
        busy = [(0, wake), (bed, 1440)]
        segs = [Segment(SLEEP, 0, wake), Segment(SLEEP, bed, 1440)]

        def free(a: int, b: int) -> bool:
            return a >= 0 and b <= 1440 and all(b + 5 <= s or a >= e + 5 for s, e in busy)

        def place(kind: int, a: int, b: int) -> bool:
            if b - a < 3 or not free(a, b):
                return False
            busy.append((a, b))
            segs.append(Segment(kind, a, b))
            return True

        work_start = work_end = None
        if weekday < 5:  # commutes on weekdays
            length = int(r.uniform(15, 50))
            a = wake + int(r.uniform(40, 90))
            if place(COMMUTE, a, a + length):
                work_start = a + length
            a = int(r.uniform(16.5 * 60, 18.5 * 60))
            if place(COMMUTE, a, a + length + int(r.normal(0, 5))):
                work_end = a
        if r.random() < p.workout_prob:
            kind = p.habit if r.random() < 0.8 else int(r.choice([WALK, RUN, CYCLE, STRENGTH]))
            dur = {WALK: (20, 60), RUN: (20, 60), CYCLE: (30, 90), STRENGTH: (30, 60)}[kind]
            for _ in range(4):
                a = int(p.workout_min + r.normal(0, 30))
                a = max(a, wake + 15)
                if place(kind, a, a + int(r.uniform(*dur))):
                    break
        for _ in range(int(r.integers(1, 4))):  # short walks: errands, lunch
            for _ in range(3):
                a = int(r.uniform(wake + 20, bed - 40))
                if place(WALK, a, a + int(r.uniform(6, 25))):
                    break
        segs = [Segment(s.kind, s.start + offset, s.end + offset) for s in segs]
        return segs, {"wake": wake + offset, "bed": bed + offset, "work_start": work_start, "work_end": work_end}

    # -- one sample ----------------------------------------------------------------
    def sample(self, index: int) -> DaySample:
        """Generate window ``index`` (training indices are < VAL_OFFSET; see ``val_sample``)."""
        T = self.minutes
        person = self.person(index // 7)
        days = -(-T // 1440)
        segments: list[Segment] = []
        anchors = []
        for d in range(days):
            segs, anch = self._day_schedule(_rng(self.seed, _TAG_DAY, index, d), person, (index + d) % 7, 1440 * d)
            segments += segs
            anchors.append(anch)
        segments = sorted((Segment(s.kind, s.start, min(s.end, T)) for s in segments if s.start < T),
                          key=lambda s: s.start)
        # Merge the evening sleep of day d with the morning sleep of day d+1 (one night).
        merged: list[Segment] = []
        for s in segments:
            if merged and s.kind == SLEEP and merged[-1].kind == SLEEP and merged[-1].end == s.start:
                merged[-1] = Segment(SLEEP, merged[-1].start, s.end)
            else:
                merged.append(s)
        activity = np.full(T, SEDENTARY, np.int8)
        for s in merged:
            activity[s.start:s.end] = s.kind
        r = _rng(self.seed, _TAG_SIGNAL, index)
        full, valid, gaps = signals(r, person, merged, activity, anchors)
        values = full[:, self._cols]
        valid = valid[:, self._cols]
        values = np.where(valid, values, np.float32(np.nan)).astype(np.float32)
        return DaySample(index=index, channels=self.channels, values=values, valid=valid, activity=activity,
                         segments=[s for s in merged if s.kind != SEDENTARY], gaps=gaps, person=person)

    def val_sample(self, j: int) -> DaySample:
        """Validation window ``j``: one day of its own person (index V + 7·j + j mod 7, V = VAL_OFFSET rounded up
        to 7k).

        One person per window, weekdays cycling, so a validation batch holds as many people as a
        shuffled training batch does; consecutive indices would put a week of one person (same
        habits, same resting heart rate) into each batch and make in-batch retrieval a different test.
        """
        first = -(-VAL_OFFSET // 7) * 7  # the first person boundary in the validation range
        return self.sample(first + 7 * j + j % 7)
