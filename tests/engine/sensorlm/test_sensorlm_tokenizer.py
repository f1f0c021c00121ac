"""Word-level tokenizer: round trip, specials, state."""

from __future__ import annotations

import json

import pytest

from engine.tasks.sensorlm import captions as cap
from engine.tasks.sensorlm.data import SyntheticWearables
from engine.tasks.sensorlm.tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIALS, UNK_ID, Tokenizer, split_words


def test_round_trip_of_captions():
    gen = SyntheticWearables(seed=0, channels=32, minutes=1440)
    texts = [cap.caption(gen.sample(i), 0, 62) for i in range(60)]
    tok = Tokenizer.build(texts, 4096)
    for t in texts:
        ids = tok.encode(t, 64)
        assert len(ids) == 64 and ids[0] == BOS_ID and EOS_ID in ids
        assert UNK_ID not in ids
        assert tok.decode(ids) == t.lower()


def test_specials_unknown_padding_and_truncation():
    tok = Tokenizer.build(["slept 7.5 hours.", "a 30-minute run around 07:10."], 64)
    assert tok.words[:4] == list(SPECIALS)
    ids = tok.encode("slept zzz hours", 8)
    assert ids == [BOS_ID, tok.ids["slept"], UNK_ID, tok.ids["hours"], EOS_ID, PAD_ID, PAD_ID, PAD_ID]
    cut = tok.encode("slept 7.5 hours. slept 7.5 hours.", 5)
    assert len(cut) == 5 and cut[-1] == EOS_ID
    assert split_words("A 30-minute run at 07:10.") == ["a", "3", "0", "-", "minute", "run", "at", "0", "7", ":",
                                                        "1", "0", "."]
    assert tok.decode(tok.encode("a 30-minute run around 07:10.", 32)) == "a 30-minute run around 07:10."
    small = Tokenizer.build(["a b c d e f"], 6)
    assert len(small) == 6


def test_state_round_trip_is_json():
    tok = Tokenizer.build(["heart rate averaged 61 bpm."], 100)
    state = json.loads(json.dumps(tok.state_dict()))
    again = Tokenizer.from_state(state)
    assert again.words == tok.words
    assert again.encode("heart rate 61", 10) == tok.encode("heart rate 61", 10)
    with pytest.raises(ValueError):
        Tokenizer.from_state({"version": 99, "words": []})
