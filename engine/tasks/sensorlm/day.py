"""What a wearable day is made of: the channels, the activities, the gaps, a person's traits and one window.

The vocabulary shared by the synthetic generator (engine.tasks.sensorlm.data,
its signals in engine.tasks.sensorlm.signals), the CSV reader and the
captions: a window is a (minutes × channels) array of values in units, NaN
where the device reported nothing, with the activity and gaps behind it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

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
