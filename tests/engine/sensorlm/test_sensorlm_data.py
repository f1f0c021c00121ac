"""Synthetic wearable data and its captions: deterministic, and the captions are true of the signals."""

from __future__ import annotations

import re

import numpy as np
import pytest

from engine.tasks.sensorlm import captions as cap
from engine.tasks.sensorlm.data import VAL_OFFSET, SyntheticWearables
from engine.tasks.sensorlm.day import ACTIVITIES, CHANNELS, SLEEP, channel_list
from engine.tasks.sensorlm.tokenizer import count_tokens


@pytest.fixture(scope="module")
def gen() -> SyntheticWearables:
    return SyntheticWearables(seed=3, channels=34, minutes=1440)


@pytest.fixture(scope="module")
def days(gen):
    return [gen.sample(i) for i in range(40)]


def test_same_seed_same_data_and_captions(gen):
    other = SyntheticWearables(seed=3, channels=34, minutes=1440)
    for i in (0, 5, 123456):
        a, b = gen.sample(i), other.sample(i)
        assert np.array_equal(a.values, b.values, equal_nan=True)
        assert np.array_equal(a.valid, b.valid)
        assert a.segments == b.segments and a.gaps == b.gaps
        assert cap.caption(a, 3, 46) == cap.caption(b, 3, 46)
    different = SyntheticWearables(seed=4, channels=34, minutes=1440).sample(0)
    assert not np.array_equal(different.values, gen.sample(0).values, equal_nan=True)


def test_shapes_channels_and_gaps(gen, days):
    for n in (26, 30, 34):
        s = SyntheticWearables(seed=3, channels=n, minutes=1440).sample(1)
        assert s.values.shape == (1440, n) and s.valid.shape == (1440, n)
        assert [c.name for c in s.channels] == [c.name for c in CHANNELS[:n]]
        # The first n channels are the same numbers whatever n is.
        assert np.array_equal(s.values, gen.sample(1).values[:, :n], equal_nan=True)
    with pytest.raises(ValueError):
        channel_list(len(CHANNELS) + 1)
    for s in days:
        assert np.isnan(s.values[~s.valid]).all() and np.isfinite(s.values[s.valid]).all()
    charging = [(s, g) for s in days for g in s.gaps if g.kind == "charging"]
    assert charging, "some days should have a charging gap"
    names = [c.name for c in CHANNELS]
    for s, g in charging:
        assert not s.valid[g.start:g.end, names.index("heart_rate")].any()
        assert s.valid[g.start:g.end, names.index("battery")].all()  # the battery still reports
        assert (s.channel("on_wrist")[g.start:g.end] == 0).all()


def test_validation_range_is_disjoint(gen):
    v = gen.val_sample(0)
    assert VAL_OFFSET <= v.index < VAL_OFFSET + 7
    assert not np.array_equal(v.values, gen.sample(0).values, equal_nan=True)
    # One person per validation window, weekdays cycling: a val batch mixes people like a training batch.
    assert len({gen.val_sample(j).person.person_id for j in range(10)}) == 10
    assert {gen.val_sample(j).index % 7 for j in range(7)} == set(range(7))


def _number(text: str, after: str) -> float:
    match = re.search(re.escape(after) + r"\s+(minus )?([0-9.]+)", text)
    assert match, (after, text)
    return float(match.group(2)) * (-1 if match.group(1) else 1)


def test_statistical_captions_match_the_channels(days):
    for s in days[:10]:
        for f in cap.facts(s, np.random.default_rng(0)):
            if f.kind.startswith("mean:"):
                c = [ch.name for ch in s.channels].index(f.data["channel"])
                true = float(np.nanmean(s.values[:, c]))
                stated = float(re.findall(r"(?:minus )?[0-9]+(?:\.[0-9]+)?", f.text)[-1].replace("minus ", "-"))
                if "minus" in f.text:
                    stated = -abs(stated)
                assert abs(stated - true) <= 0.5 * 10 ** -f.data["decimals"] + 1e-6, (f.text, true)
            if f.kind == "total:steps":
                assert f.data["total"] == round(float(np.nansum(s.channel("steps"))))


def test_stated_mean_heart_rate_in_caption(days):
    seen = 0
    for s in days:
        text = cap.caption(s, 3, 120)  # a budget that leaves room for the heart-rate sentence
        hr = re.search(r"(?:average heart rate|mean heart rate was|heart rate averaged) ([0-9]+) bpm", text.lower())
        if hr:
            assert abs(int(hr.group(1)) - np.nanmean(s.channel("heart_rate"))) <= 0.5
            seen += 1
    assert seen >= len(days) // 2


def test_stated_run_is_in_the_steps_channel(gen):
    found = 0
    for i in range(300):
        s = gen.sample(i)
        for f in cap.semantic(s, np.random.default_rng(i)):
            if f.kind != "activity:run":
                continue
            found += 1
            a, b = f.data["start"], f.data["end"]
            hh, mm = re.search(r"(\d\d):(\d\d)", f.text).groups()
            assert int(hh) * 60 + int(mm) == a and f"{b - a}" in f.text
            steps = s.channel("steps")
            # Running cadence is ~150-190 steps/min; a sedentary day sits near 0.
            assert np.nanmedian(steps[a:b]) > 130
            assert np.nanmedian(steps[max(0, a - 120):a]) < 100 or np.nanmedian(steps[b:b + 120]) < 100
        if found >= 3:
            break
    assert found >= 3


def test_sleep_and_gap_facts_are_true(days):
    for s in days:
        for f in cap.facts(s, np.random.default_rng(1)):
            if f.kind == "sleep":
                minutes = int((s.activity == SLEEP).sum())
                assert abs(f.data["hours"] - minutes / 60) <= 0.05 + 1e-9
                stage = s.channel("sleep_state")
                asleep = (s.activity == SLEEP) & ~np.isnan(stage)
                assert (stage[asleep] > 0).mean() > 0.95
            if f.kind.startswith("gap:"):
                assert not s.valid[f.data["start"]:f.data["end"], 0].any()
            if f.kind.startswith("activity:"):
                assert (s.activity[f.data["start"]:f.data["end"]] == ACTIVITIES.index(f.data["activity"])).all()


def test_caption_budget_and_levels(days):
    levels = set()
    for s in days:
        text = cap.caption(s, 3, 30)
        assert count_tokens(text) <= 30
        levels |= {f.level for f in cap.facts(s, np.random.default_rng(0))}
    assert levels == set(cap.LEVELS)
