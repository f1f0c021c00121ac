"""Every synthetic channel of one window, derived from its per-minute activity and the person's traits.

Effort comes first (each segment's pace, a warm-up ramp, sedentary fidgets);
heart rate follows it with a ~2-minute lag, skin temperature with ~30, and
the other channels are built from those and from each other (HRV from heart
rate and sleep stage, stress from heart rate, HRV and skin conductance,
floors from altitude and steps). Last, gaps hide data the way devices do.

One random stream feeds the whole window and each group draws from it in
turn, so the order of the groups in ``signals`` is part of the data: a
window is a pure function of (seed, index) only while that order holds.
"""

from __future__ import annotations

import numpy as np

from engine.tasks.sensorlm.day import (
    CHANNEL_INDEX,
    CHANNELS,
    COMMUTE,
    CYCLE,
    RUN,
    SEDENTARY,
    SLEEP,
    STRENGTH,
    WALK,
    Gap,
    Person,
    Segment,
)

#: Per-activity base levels: MET, acceleration (g), sound (dB), whether it happens outdoors.
MET_LEVEL = np.array([0.9, 1.3, 3.3, 9.0, 7.0, 5.0, 1.8], np.float32)
ACCEL_LEVEL = np.array([0.004, 0.02, 0.24, 0.7, 0.12, 0.34, 0.07], np.float32)
NOISE_DB_LEVEL = np.array([30.0, 48.0, 58.0, 60.0, 62.0, 72.0, 68.0], np.float32)
OUTDOOR = np.array([0, 0, 1, 1, 1, 0, 1], bool)

COL = CHANNEL_INDEX


def lag(x: np.ndarray, tau: float) -> np.ndarray:
    """Causal first-order lag with time constant ``tau`` minutes (truncated exponential kernel, O(T·6τ))."""
    n = max(2, int(6 * tau))
    kernel = np.exp(-np.arange(n, dtype=np.float64) / tau)
    kernel /= kernel.sum()
    padded = np.concatenate([np.full(n - 1, x[0]), x])  # hold the first value so the start has no ramp
    return np.convolve(padded, kernel, mode="valid").astype(np.float32)


def signals(r: np.random.Generator, p: Person, segments: list[Segment], activity: np.ndarray,
            anchors: list[dict]) -> tuple[np.ndarray, np.ndarray, list[Gap]]:
    """All CHANNELS for one window (T, 34) plus the validity mask and the gap list."""
    day = DaySignals(r, p, segments, activity, anchors)
    for group in (day.effort, day.heart_rate, day.steps, day.speed, day.motion, day.sleep_stages, day.cardio,
                  day.skin_and_eda, day.stress_and_energy, day.place, day.environment):
        group()
    valid, gaps = day.gaps()
    return day.out, valid, gaps


class DaySignals:
    """One window's channels (``out``, T × all CHANNELS), built group by group; each group keeps what a later
    one derives from (effort, heart rate, cadence, sleep stage…)."""

    def __init__(self, r: np.random.Generator, p: Person, segments: list[Segment], activity: np.ndarray,
                 anchors: list[dict]) -> None:
        self.r, self.p, self.segments, self.activity, self.anchors = r, p, segments, activity, anchors
        self.T = T = len(activity)
        self.t = np.arange(T, dtype=np.float32)
        self.tod = (self.t % 1440) / 60.0  # hour of day
        self.out = np.zeros((T, len(CHANNELS)), np.float32)
        self.asleep = activity == SLEEP

    def effort(self) -> None:
        """Per-segment intensity factor (pace), warm-up ramp, per-minute wobble; MET per minute."""
        r, p, T, activity = self.r, self.p, self.T, self.activity
        factor = np.ones(T, np.float32)
        walking_part = np.isin(activity, (WALK, RUN))
        for s in self.segments:
            if s.kind in (WALK, RUN, CYCLE, STRENGTH):
                f = r.uniform(0.85, 1.15) * (0.9 + 0.25 * p.fitness if s.kind in (RUN, CYCLE) else 1.0)
                ramp = np.minimum(1.0, (np.arange(s.minutes) + 1) / 4.0)  # 4-minute warm-up
                factor[s.start:s.end] = f * (0.6 + 0.4 * ramp)
            elif s.kind == COMMUTE:  # walk to/from the vehicle at both ends
                w = min(int(r.uniform(4, 9)), s.minutes // 3)
                walking_part[s.start:s.start + w] = True
                walking_part[s.end - w:s.end] = True
        met = MET_LEVEL[activity] * factor * np.exp(r.normal(0, 0.08, T)).astype(np.float32)
        commute_walk = (activity == COMMUTE) & walking_part
        met[commute_walk] = 3.0
        # Sedentary fidgets: getting up now and then.
        fidget = (activity == SEDENTARY) & (r.random(T) < 0.04)
        met[fidget] += r.uniform(0.5, 1.5, int(fidget.sum()))
        self.factor, self.walking_part, self.commute_walk, self.fidget = factor, walking_part, commute_walk, fidget
        self.met = np.maximum(met, 0.8)

    def heart_rate(self) -> None:
        """Heart rate follows effort with a ~2-minute lag; sleep sits below resting; fitter = lower at same effort."""
        r, p, T = self.r, self.p, self.T
        reserve = p.max_hr - p.resting_hr
        drive = np.clip((self.met - 1.2) / (11.0 + 5.0 * p.fitness), 0, 1) ** 0.8
        hr_target = (p.resting_hr + 8 + reserve * drive - 10 * self.asleep
                     + 3 * np.sin(2 * np.pi * (self.tod - 16) / 24))
        hr = lag(hr_target.astype(np.float32), 2.0) + r.normal(0, 1.8, T).astype(np.float32)
        self.hr = np.clip(np.round(hr), 35, 215)
        self.out[:, COL["heart_rate"]] = self.hr

    def steps(self) -> None:
        """Steps and cadence."""
        r, p, T, activity, factor = self.r, self.p, self.T, self.activity, self.factor
        cad = np.zeros(T, np.float32)
        walk_like = self.walking_part & np.isin(activity, (WALK, COMMUTE))
        cad[walk_like] = r.normal(108, 6, int(walk_like.sum())) * np.sqrt(factor[walk_like])
        run = activity == RUN
        cad[run] = r.normal(158 + 15 * p.fitness, 4, int(run.sum())) * np.sqrt(factor[run])
        moving_frac = np.clip(r.normal(0.93, 0.05, T), 0.6, 1.0)
        steps = cad * moving_frac
        sed = activity == SEDENTARY
        steps[sed] = r.poisson(1.5, int(sed.sum()))
        steps[self.fidget] = r.integers(15, 60, int(self.fidget.sum()))
        strength = activity == STRENGTH
        steps[strength] = r.poisson(9, int(strength.sum()))
        self.step_count = np.round(steps)
        self.out[:, COL["steps"]] = self.step_count
        self.cadence = np.where(cad > 0, np.round(cad), 0)
        self.out[:, COL["cadence"]] = self.cadence
        self.run = run

    def speed(self) -> None:
        """Speed, distance, stride, cycling power."""
        r, p, T, activity, out, cadence = self.r, self.p, self.T, self.activity, self.out, self.cadence
        speed = cadence * p.step_length_m * (1.0 + 0.5 * self.run) * 60 / 1000  # km/h; running strides are longer
        cyc = activity == CYCLE
        speed[cyc] = r.normal(21 + 6 * p.fitness, 2.0, int(cyc.sum())) * self.factor[cyc]
        vehicle = (activity == COMMUTE) & ~self.walking_part
        speed[vehicle] = np.clip(r.normal(32, 12, int(vehicle.sum())), 0, 90)
        speed = np.round(np.maximum(speed, 0), 1)
        out[:, COL["speed"]] = speed
        out[:, COL["distance"]] = np.round(speed * 1000 / 60, 1)
        out[:, COL["stride_length"]] = np.round(np.where(cadence > 0, speed * 1000 / 60 / np.maximum(cadence, 1), 0), 2)
        out[:, COL["power"]] = np.round(np.where(cyc, p.weight_kg * (1.8 + 1.4 * p.fitness) * self.factor
                                                 + r.normal(0, 12, T), 0).clip(0))

    def motion(self) -> None:
        """Acceleration magnitude, gyro, and posture-dependent axis means."""
        r, T, out = self.r, self.T, self.out
        accel = ACCEL_LEVEL[self.activity] * np.sqrt(self.factor) * np.exp(r.normal(0, 0.25, T)).astype(np.float32)
        accel[self.fidget] += 0.08
        accel[self.commute_walk] = 0.22
        out[:, COL["accel_mag"]] = np.round(accel, 3)
        out[:, COL["gyro_mag"]] = np.round(accel * 140 + np.abs(r.normal(0, 1.0, T)), 1)
        drift = np.cumsum(r.normal(0, 0.05, (T, 3)), axis=0).astype(np.float32)
        posture = np.where(self.asleep[:, None], [0.1, 0.2, -0.95], [-0.75, 0.3, 0.45]).astype(np.float32)
        axes = posture + 0.15 * np.sin(drift) + r.normal(0, 1, (T, 3)).astype(np.float32) * accel[:, None]
        out[:, COL["accel_x"]:COL["accel_z"] + 1] = np.round(axes, 3)

    def sleep_stages(self) -> None:
        """~90-minute cycles, deep early in the night, REM late; stages held for 5-minute blocks."""
        r = self.r
        stage = np.zeros(self.T, np.float32)
        for s in self.segments:
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
        self.stage = stage
        self.out[:, COL["sleep_state"]] = stage

    def cardio(self) -> None:
        """HRV falls with heart rate and rises in deep sleep; respiration, SpO2, VO2, energy, heart zone."""
        r, p, T, out, met, asleep = self.r, self.p, self.T, self.out, self.met, self.asleep
        stage, hr = self.stage, self.hr
        hrv = (25 + 45 * p.fitness) * np.exp(-(hr - p.resting_hr) / 30.0) * (1 + 0.35 * (stage == 2))
        self.hrv = hrv = hrv * np.exp(r.normal(0, 0.12, T))
        out[:, COL["hrv"]] = np.round(np.clip(hrv, 5, 200), 1)
        resp = lag(12.0 + 1.6 * (met - 1.0) - 1.0 * asleep, 1.5) + r.normal(0, 0.6, T)
        out[:, COL["resp_rate"]] = np.round(np.clip(resp, 8, 55), 1)
        out[:, COL["resp_var"]] = np.round(np.abs(0.4 + 0.1 * (stage == 3) * 6 + r.normal(0, 0.15, T)), 2)
        spo2 = 97.6 - 0.8 * asleep + r.normal(0, 0.5, T) - (asleep & (r.random(T) < 0.02)) * r.uniform(1, 4, T)
        out[:, COL["spo2"]] = np.round(np.clip(spo2, 85, 100), 1)
        out[:, COL["met"]] = np.round(met, 2)
        out[:, COL["vo2"]] = np.round(met * 3.5, 1)
        out[:, COL["calories"]] = np.round(met * 3.5 * p.weight_kg / 200.0, 2)
        out[:, COL["heart_zone"]] = np.digitize(hr / p.max_hr, [0.5, 0.6, 0.7, 0.8, 0.9])

    def skin_and_eda(self) -> None:
        """Skin temperature (rises in sleep, dips in exercise, ~30-minute lag); EDA: a slowly wandering tonic
        level, sweat during effort, phasic responses (counted per minute)."""
        r, p, T, out, met, asleep = self.r, self.p, self.T, self.out, self.met, self.asleep
        skin = p.skin_temp_base + 1.1 * asleep - 0.25 * np.clip(met - 2.0, 0, 8) / 3.0
        out[:, COL["skin_temp"]] = np.round(lag(skin.astype(np.float32), 30.0) + r.normal(0, 0.05, T), 2)
        tonic = 1.5 + 0.8 * np.abs(lag(np.cumsum(r.normal(0, 0.05, T)).astype(np.float32), 20.0))
        sweat = lag(np.clip(met - 3.0, 0, 10).astype(np.float32), 8.0) * 0.4
        peaks = r.poisson(np.where(asleep, 0.02, 0.15) + 0.1 * (met > 4), T)
        self.phasic = lag(peaks.astype(np.float32), 1.5) * 1.2
        out[:, COL["eda"]] = np.round(tonic + sweat + self.phasic + r.normal(0, 0.02, T), 2)
        out[:, COL["eda_peaks"]] = peaks

    def stress_and_energy(self) -> None:
        """Stress: high heart rate at low effort with low HRV, zero in sleep and during exercise. Body energy:
        recharged in sleep, drained by effort."""
        p, out, met, asleep = self.p, self.out, self.met, self.asleep
        arousal = (self.hr - p.resting_hr - 6 * (met - 1.3)) / 8.0 - (self.hrv - 35.0) / 25.0 + 0.3 * self.phasic
        stress = 100 / (1 + np.exp(-(arousal - 0.5)))
        stress[asleep | (met > 2.5)] = 0
        out[:, COL["stress"]] = np.round(stress)
        start_energy = self.r.uniform(20, 45)
        rate = np.where(asleep, 0.12, -0.018 - 0.01 * np.clip(met - 1.3, 0, 10))
        out[:, COL["body_energy"]] = np.round(np.clip(start_energy + np.cumsum(rate), 5, 100), 1)

    def place(self) -> None:
        """Altitude between home and work, hills on outdoor workouts; pressure follows; floors climbed."""
        r, p, T, out = self.r, self.p, self.T, self.out
        altitude = np.full(T, p.home_altitude, np.float32)
        for anch in self.anchors:
            if anch["work_start"] is not None and anch["work_end"] is not None:
                a, b = anch["work_start"], min(anch["work_end"], T)
                if a < T:
                    altitude[a:b] = p.work_altitude
        for s in self.segments:
            if s.kind in (WALK, RUN, CYCLE):
                m = np.arange(s.minutes)
                amp = r.uniform(3, 35)
                altitude[s.start:s.end] += amp * np.sin(np.pi * m / max(s.minutes, 1)) * r.choice([-1, 1])
        altitude = lag(altitude, 2.0)
        out[:, COL["altitude"]] = np.round(altitude + r.normal(0, 0.8, T), 1)
        weather = 1013 + r.normal(0, 8) + np.cumsum(r.normal(0, 0.02, T))
        out[:, COL["pressure"]] = np.round(weather - 0.12 * altitude + r.normal(0, 0.05, T), 1)
        climbing = np.maximum(np.diff(altitude, prepend=altitude[0]), 0) * (self.step_count > 30)
        out[:, COL["floors"]] = np.floor(climbing / 3.0 + r.random(T) * (climbing > 0.5))

    def environment(self) -> None:
        """Light (log10 lux), temperature, sound."""
        r, T, out, activity, tod = self.r, self.T, self.out, self.activity, self.tod
        outdoor = OUTDOOR[activity] & (self.walking_part | (activity == CYCLE) | (activity == COMMUTE))
        sun = np.clip(np.sin(np.pi * (tod - 6.0) / 13.0), 0, 1)
        light = np.where(self.asleep, 0.0, np.where(outdoor & (sun > 0), 2.8 + 1.9 * sun, 2.4 + 0.2 * sun))
        out[:, COL["ambient_light"]] = np.round(np.clip(light + r.normal(0, 0.1, T), 0, 5.3), 2)
        day_lo, day_hi = r.normal(9, 6), r.uniform(5, 12)
        outside_temp = day_lo + day_hi * np.clip(np.sin(np.pi * (tod - 5.0) / 20.0), 0, 1)
        out[:, COL["ambient_temp"]] = np.round(lag(np.where(outdoor, outside_temp, 21.5 + r.normal(0, 0.3)), 5.0)
                                               + r.normal(0, 0.1, T), 1)
        out[:, COL["noise_db"]] = np.round(NOISE_DB_LEVEL[activity] + r.normal(0, 3, T), 1)
        self.outdoor = outdoor

    def gaps(self) -> tuple[np.ndarray, list[Gap]]:
        """Charging (off wrist, environment still reports), device off, optical dropouts; the on-wrist flag and
        the battery they drive. Returns (valid, gaps in time order)."""
        r, T, t, out = self.r, self.T, self.t, self.out
        valid = np.ones((T, len(CHANNELS)), bool)
        wrist = np.array([c.wrist for c in CHANNELS])
        gaps: list[Gap] = []
        on_wrist = np.ones(T, np.float32)
        battery_rate = -0.055 - 0.1 * self.outdoor  # GPS on outdoor activities drains faster
        awake_sed = np.flatnonzero((self.activity == SEDENTARY)[: max(T - 120, 1)])
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
                valid[a:b, COL["heart_rate"]] = False
                valid[a:b, COL["hrv"]] = False
        out[:, COL["on_wrist"]] = on_wrist
        battery = np.clip(r.uniform(55, 100) + np.cumsum(battery_rate), 2, 100)
        out[:, COL["battery"]] = np.round(battery, 1)
        gaps.sort(key=lambda g: g.start)
        return valid, gaps
