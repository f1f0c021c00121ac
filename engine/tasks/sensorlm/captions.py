"""Captions that are true of the signals, at three levels, with several paraphrases per fact.

* statistical: mean, range or spread of a channel over its valid minutes, in
  the channel's units ("average heart rate 68 bpm", "9120 steps in total");
* structural: where the day's shape is ("heart rate peaked at 171 bpm around
  07:32", "most steps came in the morning", "no data from 11:17 to 11:58 while
  charging");
* semantic: what the person did, from the hidden schedule, checked against the
  signals ("a 40-minute run around 07:10 with heart rate near 152 bpm",
  "slept 7.3 hours").

Every number is computed from the generated values (valid minutes only), and a
scheduled activity is only mentioned when at least 80 % of its minutes were
recorded, so a caption never states what the data cannot show. Numbers are
rounded to the stated precision (integers for bpm and steps, 0.1 h for sleep).
Captions are written in the tokenizer's house style (lower-case, words, digits,
``. , : - %``; sentences never start with a digit) so decode(encode(c)) == c.

``facts()`` returns every fact with its level and values (what tests check);
``compose()`` picks and orders facts into one caption under a token budget;
``describe_signals()`` does the statistical and structural levels for data with
no schedule (CSV windows without a captions file).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from engine.tasks.sensorlm.day import COMMUTE, CYCLE, RUN, SLEEP, STRENGTH, WALK, Channel, DaySample
from engine.tasks.sensorlm.tokenizer import count_tokens

#: How a channel is spoken in captions: (name, unit word, decimals). Unknown CSV channels use their column name.
SPOKEN: dict[str, tuple[str, str, int]] = {
    "heart_rate": ("heart rate", "bpm", 0), "steps": ("steps", "steps per minute", 0),
    "cadence": ("cadence", "steps per minute", 0), "skin_temp": ("skin temperature", "degrees", 1),
    "eda": ("skin conductance", "microsiemens", 1), "sleep_state": ("sleep stage", "", 1),
    "accel_mag": ("movement", "g", 2), "altitude": ("altitude", "m", 0), "hrv": ("hrv", "ms", 0),
    "resp_rate": ("breathing rate", "breaths per minute", 1), "spo2": ("blood oxygen", "%", 1),
    "calories": ("energy use", "kcal per minute", 1), "met": ("met", "", 1), "speed": ("speed", "km per hour", 1),
    "distance": ("distance per minute", "m", 0), "heart_zone": ("heart zone", "", 1), "stress": ("stress", "", 0),
    "ambient_light": ("light", "log lux", 1), "ambient_temp": ("air temperature", "degrees", 1),
    "pressure": ("air pressure", "hpa", 0), "floors": ("floors per minute", "", 1), "on_wrist": ("wear", "", 2),
    "battery": ("battery", "%", 0), "body_energy": ("body energy", "", 0),
    "gyro_mag": ("rotation", "degrees per second", 0),
    "stride_length": ("stride", "m", 2), "power": ("power", "watts", 0), "noise_db": ("sound level", "db", 0),
    "accel_x": ("x acceleration", "g", 2), "accel_y": ("y acceleration", "g", 2), "accel_z": ("z acceleration", "g", 2),
    "eda_peaks": ("skin responses", "per minute", 1), "vo2": ("oxygen uptake", "ml per kg per minute", 1),
    "resp_var": ("breathing variability", "", 2),
}

LEVELS = ("semantic", "statistical", "structural")
_KIND_WORDS = {RUN: ("run", "running"), CYCLE: ("bike ride", "cycling"),
               STRENGTH: ("strength workout", "strength training"), WALK: ("walk", "walking")}
_PERIODS = (("night", 0, 6), ("morning", 6, 12), ("afternoon", 12, 18), ("evening", 18, 24))
#: A scheduled segment is mentioned only if at least this fraction of its minutes was recorded.
MIN_COVERAGE = 0.8


@dataclass(frozen=True)
class Fact:
    """One true statement: its level, a kind tag, the sentence, and the numbers it states."""

    level: str
    kind: str
    text: str
    data: dict = field(default_factory=dict)


def clock(minute: float) -> str:
    """'HH:MM' of a minute of day (wraps past midnight)."""
    m = int(round(minute)) % 1440
    return f"{m // 60:02d}:{m % 60:02d}"


def _fmt(x: float, decimals: int) -> str:
    value = round(float(x), decimals)
    text = str(int(value)) if decimals == 0 else f"{value:.{decimals}f}"
    if text.lstrip("-").strip("0.") == "":
        return text.lstrip("-")  # "-0.0" reads as 0
    return "minus " + text[1:] if text.startswith("-") else text  # a bare "-" would glue to the word before it


def _spoken(ch: Channel | str) -> tuple[str, str, int]:
    name = ch if isinstance(ch, str) else ch.name
    return SPOKEN.get(name, (name.replace("_", " ").lower(), "", 2))


def _unit(u: str) -> str:
    return "" if not u else ("%" if u == "%" else " " + u)


def _pick(rng: np.random.Generator, options: Sequence[str]) -> str:
    return options[int(rng.integers(len(options)))]


def statistical(values: np.ndarray, valid: np.ndarray, channels: Sequence[Channel | str],
                rng: np.random.Generator, only: Sequence[int] | None = None) -> list[Fact]:
    """Mean, range and spread facts for every channel with valid data (steps: the day's total).

    ``only``: channel positions to state facts about (default all); formatting is the costly part.
    """
    # One vectorised pass over all channels (float64 sums), then only string formatting per channel.
    n = valid.sum(0)
    v = np.where(valid, values, 0.0).astype(np.float64)
    total = v.sum(0)
    mean = total / np.maximum(n, 1)
    sd = np.sqrt(np.maximum((v * v).sum(0) / np.maximum(n, 1) - mean**2, 0.0))
    lo = np.where(valid, values, np.inf).min(0)
    hi = np.where(valid, values, -np.inf).max(0)
    picks = rng.integers(0, 3, size=(len(channels), 3))
    out: list[Fact] = []
    for c in range(len(channels)) if only is None else only:
        ch = channels[c]
        if n[c] == 0:
            continue
        name, unit, dec = _spoken(ch)
        key = ch if isinstance(ch, str) else ch.name
        u = _unit(unit)
        p = picks[c]
        if key == "steps":
            t = int(round(float(total[c])))
            text = (f"about {t} steps in total", f"took {t} steps", f"a total of {t} steps")[p[0]]
            out.append(Fact("statistical", "total:steps", text, {"channel": key, "total": t}))
            continue
        m = _fmt(mean[c], dec)
        out.append(Fact("statistical", f"mean:{key}", (
            f"average {name} {m}{u}", f"mean {name} was {m}{u}", f"{name} averaged {m}{u}")[p[0]],
            {"channel": key, "mean": round(float(mean[c]), dec), "decimals": dec}))
        a, b = _fmt(lo[c], dec), _fmt(hi[c], dec)
        out.append(Fact("statistical", f"range:{key}", (
            f"{name} ranged from {a} to {b}{u}", f"{name} between {a} and {b}{u}",
            f"{name} spanned {a} to {b}{u}")[p[1]],
            {"channel": key, "min": round(float(lo[c]), dec), "max": round(float(hi[c]), dec)}))
        s = _fmt(sd[c], max(dec, 1))
        out.append(Fact("statistical", f"spread:{key}", (
            f"{name} varied by {s}{u}", f"{name} had a spread of {s}{u}", f"the spread of {name} was {s}{u}")[p[2]],
            {"channel": key, "std": round(float(sd[c]), max(dec, 1))}))
    return out


def structural(values: np.ndarray, valid: np.ndarray, channels: Sequence[Channel | str], start_minute: int,
               rng: np.random.Generator, gaps: Sequence = ()) -> list[Fact]:
    """Peak-and-when, busiest part of the day, trends, and long gaps."""
    names = [c if isinstance(c, str) else c.name for c in channels]
    out: list[Fact] = []
    tod = (start_minute + np.arange(values.shape[0])) % 1440
    if "heart_rate" in names:
        c = names.index("heart_rate")
        ok = valid[:, c]
        if ok.any():
            hr = np.where(ok, values[:, c], -np.inf)
            i = int(np.argmax(hr))
            peak = int(round(float(hr[i])))
            out.append(Fact("structural", "peak:heart_rate", _pick(rng, (
                f"heart rate peaked at {peak} bpm around {clock(tod[i])}",
                f"the highest heart rate was {peak} bpm at {clock(tod[i])}",
                f"heart rate reached {peak} bpm at {clock(tod[i])}")), {"value": peak, "minute": i}))
    if "steps" in names:
        c = names.index("steps")
        v = np.where(valid[:, c], values[:, c], 0.0)
        sums = [(float(v[(tod >= a * 60) & (tod < b * 60)].sum()), p) for p, a, b in _PERIODS]
        best, period = max(sums)
        if best > 0:
            out.append(Fact("structural", "busiest:steps", _pick(rng, (
                f"most steps came in the {period}", f"the {period} was the most active",
                f"walking was concentrated in the {period}")), {"period": period}))
    for key, word in (("body_energy", "body energy"), ("skin_temp", "skin temperature"), ("battery", "battery")):
        if key not in names:
            continue
        c = names.index(key)
        idx = np.flatnonzero(valid[:, c])
        if idx.size < 120:
            continue
        q = max(idx.size // 4, 1)
        first, last = float(values[idx[:q], c].mean()), float(values[idx[-q:], c].mean())
        scale = max(float(values[idx, c].std()), 1e-6)
        if abs(last - first) < 0.5 * scale:
            continue  # no clear trend: say nothing rather than something false
        verb = "rose" if last > first else "fell"
        out.append(Fact("structural", f"trend:{key}", _pick(rng, (
            f"{word} {verb} over the day", f"{word} {verb} from start to end", f"over the day {word} {verb}")),
            {"channel": key, "first": first, "last": last}))
    for g in gaps:
        if g.end - g.start >= 15 and g.kind in ("charging", "device_off"):
            why = "while charging" if g.kind == "charging" else "with the device off"
            out.append(Fact("structural", f"gap:{g.kind}", _pick(rng, (
                f"no data from {clock(tod[g.start])} to {clock(tod[g.end - 1] + 1)} {why}",
                f"a gap from {clock(tod[g.start])} to {clock(tod[g.end - 1] + 1)} {why}")),
                {"start": g.start, "end": g.end}))
    return out


def semantic(sample: DaySample, rng: np.random.Generator) -> list[Fact]:
    """Sleep, workouts and commutes from the hidden schedule, with signal-derived numbers."""
    names = [c.name for c in sample.channels]
    recorded = sample.valid.any(axis=1)
    hr_col = names.index("heart_rate") if "heart_rate" in names else None
    out: list[Fact] = []
    tod = lambda m: clock(sample.start_minute + m)  # noqa: E731

    sleep = [s for s in sample.segments if s.kind == SLEEP]
    if sleep and all(recorded[s.start:s.end].mean() >= MIN_COVERAGE for s in sleep):
        hours = round(sum(s.minutes for s in sleep) / 60.0, 1)
        out.append(Fact("semantic", "sleep", _pick(rng, (
            f"slept {hours:.1f} hours", f"got {hours:.1f} hours of sleep", f"sleep totalled {hours:.1f} hours")),
            {"hours": hours}))
        morning = [s for s in sleep if s.start == 0 and s.end < sample.values.shape[0]]
        if morning:
            out.append(Fact("semantic", "wake", _pick(rng, (f"woke at {tod(morning[0].end)}",
                                                              f"woke up around {tod(morning[0].end)}")),
                            {"minute": morning[0].end}))
        evening = [s for s in sleep if s.start > 0]
        if evening:
            out.append(Fact("semantic", "bed", _pick(rng, (f"went to bed at {tod(evening[-1].start)}",
                                                             f"fell asleep around {tod(evening[-1].start)}")),
                            {"minute": evening[-1].start}))
    workouts = [s for s in sample.segments if s.kind in _KIND_WORDS and (s.kind != WALK or s.minutes >= 15)
                and recorded[s.start:s.end].mean() >= MIN_COVERAGE]
    for s in workouts:
        noun, verb = _KIND_WORDS[s.kind]
        text = _pick(rng, (f"a {s.minutes}-minute {noun} around {tod(s.start)}",
                           f"{verb} for {s.minutes} minutes from {tod(s.start)}",
                           f"a {noun} of {s.minutes} minutes at {tod(s.start)}"))
        data = {"activity": s.name, "start": s.start, "end": s.end, "minutes": s.minutes}
        if hr_col is not None and sample.valid[s.start:s.end, hr_col].any():
            hr = int(round(float(np.nanmean(sample.values[s.start:s.end, hr_col]))))
            text += _pick(rng, (f" with heart rate near {hr} bpm", f", averaging {hr} bpm"))
            data["heart_rate"] = hr
        out.append(Fact("semantic", f"activity:{s.name}", text, data))
    if not any(s.kind in (RUN, CYCLE, STRENGTH) for s in sample.segments):
        out.append(Fact("semantic", "rest_day", _pick(rng, ("no workout", "a rest day", "no exercise session")), {}))
    commutes = [s for s in sample.segments if s.kind == COMMUTE and recorded[s.start:s.end].mean() >= MIN_COVERAGE]
    if commutes:
        times = " and ".join(tod(s.start) for s in commutes)
        out.append(Fact("semantic", "commute", _pick(rng, (f"commuted at {times}", f"travelled at {times}")),
                        {"starts": [s.start for s in commutes]}))
    return out


#: Channels a caption draws statistical facts from: heart rate and steps plus this many at random.
STAT_CHANNELS = 4


def _stat_subset(names: Sequence[str], rng: np.random.Generator) -> list[int]:
    keep = [names.index(k) for k in ("heart_rate", "steps") if k in names]
    others = [i for i in range(len(names)) if i not in keep]
    return keep + [others[i] for i in rng.permutation(len(others))[:STAT_CHANNELS]]


def facts(sample: DaySample, rng: np.random.Generator, all_channels: bool = True) -> list[Fact]:
    """Facts about a synthetic sample, all three levels, paraphrases drawn from ``rng``.

    ``all_channels=False`` states statistics for heart rate, steps and STAT_CHANNELS random channels only
    (what a caption can hold anyway; it keeps caption generation well under a millisecond).
    """
    only = None if all_channels else _stat_subset([c.name for c in sample.channels], rng)
    return (semantic(sample, rng)
            + statistical(sample.values, sample.valid, sample.channels, rng, only)
            + structural(sample.values, sample.valid, sample.channels, sample.start_minute, rng, sample.gaps))


def compose(all_facts: Sequence[Fact], rng: np.random.Generator, max_tokens: int | None = None) -> str:
    """One caption: two activities (workouts first), rest day, commute, sleep, mean heart rate, steps, then a mix.

    Whole sentences only: ``max_tokens`` is the budget for the words (the <bos>/<eos> pair not counted) and a
    fact that would not fit is skipped, so a caption is never cut mid-sentence.
    """
    acts = sorted((f for f in all_facts if f.kind.startswith("activity:")), key=lambda f: f.kind == "activity:walk")
    # The facts that tell days apart most (what was done, workday or not) lead; numbers follow.
    first = acts[:2] + [f for f in all_facts if f.kind in ("rest_day", "commute", "sleep")]
    first += [f for f in all_facts if f.kind in ("mean:heart_rate", "total:steps")]
    taken = {id(f) for f in first}
    rest = [f for f in all_facts if id(f) not in taken]
    order = rng.permutation(len(rest)) if rest else []
    chosen: list[str] = []
    used = 0
    for f in first + [rest[i] for i in order]:
        if max_tokens is not None and max_tokens - used < 4:
            break  # no fact is shorter than 4 tokens
        sentence = f.text[0].upper() + f.text[1:] + "."
        n = count_tokens(sentence)
        if max_tokens is not None and used + n > max_tokens:
            continue
        chosen.append(sentence)
        used += n
    return " ".join(chosen)


def caption(sample: DaySample, seed: int, max_tokens: int | None = None) -> str:
    """The caption of a synthetic sample (deterministic in seed and sample index)."""
    rng = np.random.default_rng([int(seed), 7, int(sample.index)])
    return compose(facts(sample, rng, all_channels=False), rng, max_tokens)


def describe_signals(values: np.ndarray, valid: np.ndarray, channels: Sequence[Channel | str], start_minute: int,
                     seed: int, key: int, max_tokens: int | None = None) -> str:
    """A statistical + structural caption for data without a schedule (CSV windows with no caption)."""
    rng = np.random.default_rng([int(seed), 8, int(key)])
    names = [c if isinstance(c, str) else c.name for c in channels]
    fs = (statistical(values, valid, channels, rng, _stat_subset(names, rng))
          + structural(values, valid, channels, start_minute, rng))
    return compose(fs, rng, max_tokens)

