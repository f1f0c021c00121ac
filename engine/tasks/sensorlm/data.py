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
sensor noise. Gaps hide data the way devices do: ``device_off`` blanks every
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

from dataclasses import dataclass, field

import numpy as np

#: Validation windows are generated from global indices at and above this (training indices stay below it).
VAL_OFFSET = 1 << 40

#: Activity codes, in the order used by the per-minute ``activity`` array.
ACTIVITIES = ("sleep", "sedentary", "walk", "run", "cycle", "strength", "commute")
SLEEP, SEDENTARY, WALK, RUN, CYCLE, STRENGTH, COMMUTE = range(len(ACTIVITIES))

#: Gap kinds: what the device was doing while data is missing.
GAP_KINDS = ("device_off", "charging", "dropout")


@dataclass(frozen=True)
class Channel:
    """One sensor channel: its name (the CSV column), unit, meaning, and decimals it is reported with."""

    name: str
    unit: str
    description: str
    decimals: int = 1
    wrist: bool = True  # False: still reports while the watch is off the wrist (charging)


#: All synthetic channels, most important first: ``data.channels = k`` keeps the first k.
CHANNELS: tuple[Channel, ...] = (
    Channel("heart_rate", "bpm", "optical heart rate", 0),
    Channel("steps", "steps/min", "step count per minute", 0),
    Channel("cadence", "spm", "steps per minute while walking or running, 0 otherwise", 0),
    Channel("skin_temp", "°C", "wrist skin temperature", 2),
    Channel("eda", "µS", "electrodermal activity (skin conductance)", 2),
    Channel("sleep_state", "stage", "0 awake, 1 light, 2 deep, 3 REM", 0),
    Channel("accel_mag", "g", "mean dynamic acceleration magnitude", 3),
    Channel("altitude", "m", "barometric altitude", 1, wrist=False),
    Channel("hrv", "ms", "heart-rate variability (RMSSD)", 1),
    Channel("resp_rate", "br/min", "respiration rate", 1),
    Channel("spo2", "%", "blood oxygen saturation", 1),
    Channel("calories", "kcal/min", "energy expenditure", 2),
    Channel("met", "MET", "metabolic equivalent of task", 2),
    Channel("speed", "km/h", "speed over ground", 1),
    Channel("distance", "m", "distance covered per minute", 1),
    Channel("heart_zone", "zone", "heart-rate zone 0-5 (fraction of max HR)", 0),
    Channel("stress", "score", "stress score 0-100", 0),
    Channel("ambient_light", "log10 lux", "ambient light", 2, wrist=False),
    Channel("ambient_temp", "°C", "ambient temperature", 1, wrist=False),
    Channel("pressure", "hPa", "barometric pressure", 1, wrist=False),
    Channel("floors", "floors", "floors climbed per minute", 0),
    Channel("on_wrist", "flag", "1 when the device is worn", 0, wrist=False),
    Channel("battery", "%", "battery level", 1, wrist=False),
    Channel("body_energy", "score", "body-energy reserve 0-100", 1),
    Channel("gyro_mag", "deg/s", "mean angular speed", 1),
    Channel("stride_length", "m", "step length while moving, 0 otherwise", 2),
    Channel("power", "W", "cycling power", 0),
    Channel("noise_db", "dB", "ambient sound level", 1, wrist=False),
    Channel("accel_x", "g", "mean acceleration, x axis", 3),
    Channel("accel_y", "g", "mean acceleration, y axis", 3),
    Channel("accel_z", "g", "mean acceleration, z axis", 3),
    Channel("eda_peaks", "peaks/min", "skin-conductance responses per minute", 0),
    Channel("vo2", "ml/kg/min", "oxygen uptake estimate", 1),
    Channel("resp_var", "br/min", "breath-to-breath variability of respiration", 2),
)
CHANNEL_INDEX = {c.name: i for i, c in enumerate(CHANNELS)}


def channel_list(n: int) -> tuple[Channel, ...]:
    """The first ``n`` synthetic channels (ValueError outside 1..len(CHANNELS))."""
    if not 1 <= n <= len(CHANNELS):
        raise ValueError(f"data.channels={n}: synthetic data has 1..{len(CHANNELS)} channels")
    return CHANNELS[:n]


@dataclass(frozen=True)
class Person:
    """Hidden traits of one synthetic person (a week of consecutive sample indices)."""

    person_id: int
    resting_hr: float
    max_hr: float
    fitness: float  # 0 (unfit) .. 1 (athlete): lowers HR at a given effort, raises HRV and pace
    weight_kg: float
    step_length_m: float
    wake_min: float  # habitual wake time, minutes after midnight
    bed_min: float
    habit: int  # favourite workout (an ACTIVITIES code)
    workout_min: float  # habitual workout start
    workout_prob: float
    skin_temp_base: float
    home_altitude: float
    work_altitude: float


@dataclass(frozen=True)
class Segment:
    """An activity from ``start`` to ``end`` (minutes from the window start, end exclusive)."""

    kind: int
    start: int
    end: int

    @property
    def name(self) -> str:
        return ACTIVITIES[self.kind]

    @property
    def minutes(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Gap:
    """Missing data from ``start`` to ``end`` (exclusive) of the given GAP_KINDS kind."""

    kind: str
    start: int
    end: int


@dataclass
class DaySample:
    """One generated window: raw values in units (NaN at gaps), the validity mask and the hidden truth."""

    index: int
    channels: tuple[Channel, ...]
    values: np.ndarray  # (minutes, channels) float32, NaN where not valid
    valid: np.ndarray  # (minutes, channels) bool
    activity: np.ndarray  # (minutes,) int8 ACTIVITIES code per minute
    segments: list[Segment] = field(default_factory=list)  # every non-sedentary segment, in time order
    gaps: list[Gap] = field(default_factory=list)
    person: Person | None = None
    start_minute: int = 0  # minute of day of the first row (synthetic windows start at midnight)

    def channel(self, name: str) -> np.ndarray:
        """Values of one channel by name (NaN at gaps)."""
        return self.values[:, [c.name for c in self.channels].index(name)]


def _rng(*key: int) -> np.random.Generator:
    # SeedSequence mixes the whole key, so (seed, tag, index) streams never collide.
    return np.random.default_rng([int(k) & 0xFFFFFFFFFFFFFFFF for k in key])


_TAG_PERSON, _TAG_DAY, _TAG_SIGNAL = 1, 2, 3

#: Per-activity base levels: MET, acceleration (g), sound (dB), whether it happens outdoors.
_MET = np.array([0.9, 1.3, 3.3, 9.0, 7.0, 5.0, 1.8], np.float32)
_ACCEL = np.array([0.004, 0.02, 0.24, 0.7, 0.12, 0.34, 0.07], np.float32)
_NOISE_DB = np.array([30.0, 48.0, 58.0, 60.0, 62.0, 72.0, 68.0], np.float32)
_OUTDOOR = np.array([0, 0, 1, 1, 1, 0, 1], bool)


def _lag(x: np.ndarray, tau: float) -> np.ndarray:
    """Causal first-order lag with time constant ``tau`` minutes (truncated exponential kernel, O(T·6τ))."""
    n = max(2, int(6 * tau))
    kernel = np.exp(-np.arange(n, dtype=np.float64) / tau)
    kernel /= kernel.sum()
    padded = np.concatenate([np.full(n - 1, x[0]), x])  # hold the first value so the start has no ramp
    return np.convolve(padded, kernel, mode="valid").astype(np.float32)


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
        full, valid, gaps = self._signals(r, person, merged, activity, anchors)
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

    # -- signals -------------------------------------------------------------------
    def _signals(self, r, p: Person, segments, activity, anchors):
        """All CHANNELS for one window (T, 34) plus the validity mask and the gap list."""
        T = self.minutes
        t = np.arange(T, dtype=np.float32)
        tod = (t % 1440) / 60.0  # hour of day
        C = len(CHANNELS)
        out = np.zeros((T, C), np.float32)
        col = CHANNEL_INDEX
        asleep = activity == SLEEP

        # Effort: per-segment intensity factor (pace), warm-up ramp, per-minute wobble.
        factor = np.ones(T, np.float32)
        walking_part = np.isin(activity, (WALK, RUN))
        for s in segments:
            if s.kind in (WALK, RUN, CYCLE, STRENGTH):
                f = r.uniform(0.85, 1.15) * (0.9 + 0.25 * p.fitness if s.kind in (RUN, CYCLE) else 1.0)
                ramp = np.minimum(1.0, (np.arange(s.minutes) + 1) / 4.0)  # 4-minute warm-up
                factor[s.start:s.end] = f * (0.6 + 0.4 * ramp)
            elif s.kind == COMMUTE:  # walk to/from the vehicle at both ends
                w = min(int(r.uniform(4, 9)), s.minutes // 3)
                walking_part[s.start:s.start + w] = True
                walking_part[s.end - w:s.end] = True
        met = _MET[activity] * factor * np.exp(r.normal(0, 0.08, T)).astype(np.float32)
        commute_walk = (activity == COMMUTE) & walking_part
        met[commute_walk] = 3.0
        # Sedentary fidgets: getting up now and then.
        fidget = (activity == SEDENTARY) & (r.random(T) < 0.04)
        met[fidget] += r.uniform(0.5, 1.5, int(fidget.sum()))
        met = np.maximum(met, 0.8)

        # Heart rate follows effort with a ~2-minute lag; sleep sits below resting; fitter = lower at same effort.
        reserve = p.max_hr - p.resting_hr
        drive = np.clip((met - 1.2) / (11.0 + 5.0 * p.fitness), 0, 1) ** 0.8
        hr_target = p.resting_hr + 8 + reserve * drive - 10 * asleep + 3 * np.sin(2 * np.pi * (tod - 16) / 24)
        hr = _lag(hr_target.astype(np.float32), 2.0) + r.normal(0, 1.8, T).astype(np.float32)
        hr = np.clip(np.round(hr), 35, 215)
        out[:, col["heart_rate"]] = hr

        # Steps and cadence.
        cad = np.zeros(T, np.float32)
        walk_like = walking_part & np.isin(activity, (WALK, COMMUTE))
        cad[walk_like] = r.normal(108, 6, int(walk_like.sum())) * np.sqrt(factor[walk_like])
        run = activity == RUN
        cad[run] = r.normal(158 + 15 * p.fitness, 4, int(run.sum())) * np.sqrt(factor[run])
        moving_frac = np.clip(r.normal(0.93, 0.05, T), 0.6, 1.0)
        steps = cad * moving_frac
        sed = activity == SEDENTARY
        steps[sed] = r.poisson(1.5, int(sed.sum()))
        steps[fidget] = r.integers(15, 60, int(fidget.sum()))
        strength = activity == STRENGTH
        steps[strength] = r.poisson(9, int(strength.sum()))
        steps = np.round(steps)
        out[:, col["steps"]] = steps
        cadence = np.where(cad > 0, np.round(cad), 0)
        out[:, col["cadence"]] = cadence

        # Speed, distance, stride, cycling power.
        speed = cadence * p.step_length_m * (1.0 + 0.5 * run) * 60 / 1000  # km/h; running strides are longer
        cyc = activity == CYCLE
        speed[cyc] = r.normal(21 + 6 * p.fitness, 2.0, int(cyc.sum())) * factor[cyc]
        vehicle = (activity == COMMUTE) & ~walking_part
        speed[vehicle] = np.clip(r.normal(32, 12, int(vehicle.sum())), 0, 90)
        speed = np.round(np.maximum(speed, 0), 1)
        out[:, col["speed"]] = speed
        out[:, col["distance"]] = np.round(speed * 1000 / 60, 1)
        out[:, col["stride_length"]] = np.round(np.where(cadence > 0, speed * 1000 / 60 / np.maximum(cadence, 1), 0), 2)
        out[:, col["power"]] = np.round(np.where(cyc, p.weight_kg * (1.8 + 1.4 * p.fitness) * factor
                                                 + r.normal(0, 12, T), 0).clip(0))

        # Motion: acceleration magnitude, gyro, and posture-dependent axis means.
        accel = _ACCEL[activity] * np.sqrt(factor) * np.exp(r.normal(0, 0.25, T)).astype(np.float32)
        accel[fidget] += 0.08
        accel[commute_walk] = 0.22
        out[:, col["accel_mag"]] = np.round(accel, 3)
        out[:, col["gyro_mag"]] = np.round(accel * 140 + np.abs(r.normal(0, 1.0, T)), 1)
        drift = np.cumsum(r.normal(0, 0.05, (T, 3)), axis=0).astype(np.float32)
        posture = np.where(asleep[:, None], [0.1, 0.2, -0.95], [-0.75, 0.3, 0.45]).astype(np.float32)
        axes = posture + 0.15 * np.sin(drift) + r.normal(0, 1, (T, 3)).astype(np.float32) * accel[:, None]
        out[:, col["accel_x"]:col["accel_z"] + 1] = np.round(axes, 3)

        # Sleep stages: ~90-minute cycles, deep early in the night, REM late; stages held for 5-minute blocks.
        stage = np.zeros(T, np.float32)
        for s in segments:
            if s.kind != SLEEP:
                continue
            m = np.arange(s.minutes)
            phase = (m % 90) / 90.0
            night = np.minimum(m / 480.0, 1.0)
            deep = (phase < 0.45) & (r.random(s.minutes) < 0.85 - 0.8 * night)
            rem = (phase > 0.7) & (r.random(s.minutes) < 0.3 + 0.6 * night)
            st = np.where(rem, 3, np.where(deep, 2, 1))
            st[:5] = 1  # falling asleep is light sleep
            block = np.repeat(st[::5], 5)[: s.minutes]
            stage[s.start:s.end] = block
            stage[s.start:s.end][r.random(s.minutes) < 0.01] = 0  # brief awakenings
        out[:, col["sleep_state"]] = stage

        # HRV falls with heart rate and rises in deep sleep; respiration, SpO2, VO2, energy.
        hrv = (25 + 45 * p.fitness) * np.exp(-(hr - p.resting_hr) / 30.0) * (1 + 0.35 * (stage == 2))
        hrv = hrv * np.exp(r.normal(0, 0.12, T))
        out[:, col["hrv"]] = np.round(np.clip(hrv, 5, 200), 1)
        resp = _lag(12.0 + 1.6 * (met - 1.0) - 1.0 * asleep, 1.5) + r.normal(0, 0.6, T)
        out[:, col["resp_rate"]] = np.round(np.clip(resp, 8, 55), 1)
        out[:, col["resp_var"]] = np.round(np.abs(0.4 + 0.1 * (stage == 3) * 6 + r.normal(0, 0.15, T)), 2)
        spo2 = 97.6 - 0.8 * asleep + r.normal(0, 0.5, T) - (asleep & (r.random(T) < 0.02)) * r.uniform(1, 4, T)
        out[:, col["spo2"]] = np.round(np.clip(spo2, 85, 100), 1)
        out[:, col["met"]] = np.round(met, 2)
        out[:, col["vo2"]] = np.round(met * 3.5, 1)
        out[:, col["calories"]] = np.round(met * 3.5 * p.weight_kg / 200.0, 2)
        zone = np.digitize(hr / p.max_hr, [0.5, 0.6, 0.7, 0.8, 0.9])
        out[:, col["heart_zone"]] = zone

        # Skin temperature rises during sleep and dips in exercise (slow, ~30-minute lag).
        skin = p.skin_temp_base + 1.1 * asleep - 0.25 * np.clip(met - 2.0, 0, 8) / 3.0
        out[:, col["skin_temp"]] = np.round(_lag(skin.astype(np.float32), 30.0) + r.normal(0, 0.05, T), 2)

        # EDA: a slowly wandering tonic level, sweat during effort, phasic responses (counted per minute).
        tonic = 1.5 + 0.8 * np.abs(_lag(np.cumsum(r.normal(0, 0.05, T)).astype(np.float32), 20.0))
        sweat = _lag(np.clip(met - 3.0, 0, 10).astype(np.float32), 8.0) * 0.4
        peaks = r.poisson(np.where(asleep, 0.02, 0.15) + 0.1 * (met > 4), T)
        phasic = _lag(peaks.astype(np.float32), 1.5) * 1.2
        out[:, col["eda"]] = np.round(tonic + sweat + phasic + r.normal(0, 0.02, T), 2)
        out[:, col["eda_peaks"]] = peaks

        # Stress: high heart rate at low effort with low HRV; zero in sleep and during exercise.
        arousal = (hr - p.resting_hr - 6 * (met - 1.3)) / 8.0 - (hrv - 35.0) / 25.0 + 0.3 * phasic
        stress = 100 / (1 + np.exp(-(arousal - 0.5)))
        stress[asleep | (met > 2.5)] = 0
        out[:, col["stress"]] = np.round(stress)

        # Body energy: recharged in sleep, drained by effort.
        start_energy = r.uniform(20, 45)
        rate = np.where(asleep, 0.12, -0.018 - 0.01 * np.clip(met - 1.3, 0, 10))
        out[:, col["body_energy"]] = np.round(np.clip(start_energy + np.cumsum(rate), 5, 100), 1)

        # Place: altitude between home and work, hills on outdoor workouts; pressure follows.
        altitude = np.full(T, p.home_altitude, np.float32)
        for _d, anch in enumerate(anchors):
            if anch["work_start"] is not None and anch["work_end"] is not None:
                a, b = anch["work_start"], min(anch["work_end"], T)
                if a < T:
                    altitude[a:b] = p.work_altitude
        for s in segments:
            if s.kind in (WALK, RUN, CYCLE):
                m = np.arange(s.minutes)
                amp = r.uniform(3, 35)
                altitude[s.start:s.end] += amp * np.sin(np.pi * m / max(s.minutes, 1)) * r.choice([-1, 1])
        altitude = _lag(altitude, 2.0)
        out[:, col["altitude"]] = np.round(altitude + r.normal(0, 0.8, T), 1)
        weather = 1013 + r.normal(0, 8) + np.cumsum(r.normal(0, 0.02, T))
        out[:, col["pressure"]] = np.round(weather - 0.12 * altitude + r.normal(0, 0.05, T), 1)
        climbing = np.maximum(np.diff(altitude, prepend=altitude[0]), 0) * (steps > 30)
        out[:, col["floors"]] = np.floor(climbing / 3.0 + r.random(T) * (climbing > 0.5))

        # Environment: light (log10 lux), temperature, sound.
        outdoor = _OUTDOOR[activity] & (walking_part | (activity == CYCLE) | (activity == COMMUTE))
        sun = np.clip(np.sin(np.pi * (tod - 6.0) / 13.0), 0, 1)
        light = np.where(asleep, 0.0, np.where(outdoor & (sun > 0), 2.8 + 1.9 * sun, 2.4 + 0.2 * sun))
        out[:, col["ambient_light"]] = np.round(np.clip(light + r.normal(0, 0.1, T), 0, 5.3), 2)
        day_lo, day_hi = r.normal(9, 6), r.uniform(5, 12)
        outside_temp = day_lo + day_hi * np.clip(np.sin(np.pi * (tod - 5.0) / 20.0), 0, 1)
        out[:, col["ambient_temp"]] = np.round(_lag(np.where(outdoor, outside_temp, 21.5 + r.normal(0, 0.3)), 5.0)
                                               + r.normal(0, 0.1, T), 1)
        out[:, col["noise_db"]] = np.round(_NOISE_DB[activity] + r.normal(0, 3, T), 1)

        # Gaps: charging (off wrist, environment still reports), device off, optical dropouts.
        valid = np.ones((T, C), bool)
        wrist = np.array([c.wrist for c in CHANNELS])
        gaps: list[Gap] = []
        on_wrist = np.ones(T, np.float32)
        battery_rate = -0.055 - 0.1 * outdoor  # GPS on outdoor activities drains faster
        awake_sed = np.flatnonzero((activity == SEDENTARY)[: max(T - 120, 1)])
        if len(awake_sed) and r.random() < 0.55:
            a = int(r.choice(awake_sed))
            b = min(a + int(r.uniform(20, 90)), T)
            gaps.append(Gap("charging", a, b))
            valid[a:b, wrist] = False
            on_wrist[a:b] = 0
            battery_rate = np.where((t >= a) & (t < b), 1.3, battery_rate)
        if r.random() < 0.15:
            a = int(r.integers(0, max(T - 60, 1)))
            b = min(a + int(r.uniform(60, 240)), T)
            if not any(g.start < b and a < g.end for g in gaps):
                gaps.append(Gap("device_off", a, b))
                valid[a:b, :] = False
        for _ in range(int(r.poisson(1.5))):  # optical dropouts: a few minutes of no pulse signal
            a = int(r.integers(0, T))
            b = min(a + int(r.integers(1, 6)), T)
            if valid[a:b, 0].all():
                gaps.append(Gap("dropout", a, b))
                valid[a:b, col["heart_rate"]] = False
                valid[a:b, col["hrv"]] = False
        out[:, col["on_wrist"]] = on_wrist
        battery = np.clip(r.uniform(55, 100) + np.cumsum(battery_rate), 2, 100)
        out[:, col["battery"]] = np.round(battery, 1)
        gaps.sort(key=lambda g: g.start)
        return out, valid, gaps
