"""Word-level tokenizer built from training captions: no downloads, JSON-able state.

Text is lower-cased and split into words (``[a-z]+``), single digits and single
punctuation marks. Numbers are spelt digit by digit ("7.3" → ``7 . 3``): the
vocabulary stays closed and small (a few hundred entries for the synthetic
captions) however many distinct values the captions state, at the cost of
longer sequences (a clock time is 5 tokens). ``decode`` re-joins digits,
decimal points, clock colons, hyphens and trailing punctuation, so
``decode(encode(c))`` gives back any caption written in that house style
(lower-cased). Ids 0..3 are the special tokens; the rest are the most frequent
words of the training captions, at most ``vocab_size`` entries in all; a word
outside the vocabulary encodes as ``<unk>``.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable, Sequence

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)

_TOKEN = re.compile(r"[a-z]+|\d|[^\sa-z\d]")
_NO_SPACE_BEFORE = {".", ",", ";", "%", ")", "!", "?", ":"}


def split_words(text: str) -> list[str]:
    """Lower-case ``text`` and split it into words, digits and punctuation marks."""
    return _TOKEN.findall(text.lower())


def count_tokens(text: str) -> int:
    """Tokens ``text`` takes without the <bos>/<eos> pair (what captions budget against)."""
    return len(split_words(text))


class Tokenizer:
    """Word-level vocabulary with <pad>, <bos>, <eos>, <unk>; encode pads to a fixed length."""

    VERSION = 1

    def __init__(self, words: Sequence[str]) -> None:
        words = list(words)
        if tuple(words[:4]) != SPECIALS:
            raise ValueError(f"tokenizer vocabulary must start with {SPECIALS}")
        if len(set(words)) != len(words):
            raise ValueError("tokenizer vocabulary has duplicate entries")
        self.words = words
        self.ids = {w: i for i, w in enumerate(words)}

    @classmethod
    def build(cls, texts: Iterable[str], vocab_size: int) -> "Tokenizer":
        """Vocabulary of the most frequent words in ``texts`` (ties broken alphabetically), ≤ vocab_size in all."""
        counts = Counter(w for t in texts for w in split_words(t))
        ranked = sorted(counts, key=lambda w: (-counts[w], w))
        return cls(list(SPECIALS) + ranked[: max(0, vocab_size - len(SPECIALS))])

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, text: str, length: int) -> list[int]:
        """``<bos> words… <eos>`` padded with <pad> (or cut, keeping <eos> last) to exactly ``length`` ids."""
        if length < 2:
            raise ValueError("length must leave room for <bos> and <eos>")
        body = [self.ids.get(w, UNK_ID) for w in split_words(text)][: length - 2]
        ids = [BOS_ID] + body + [EOS_ID]
        return ids + [PAD_ID] * (length - len(ids))

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids`` up to the first <eos> (specials other than <unk> dropped), digits and marks re-joined."""
        out: list[str] = []
        for i in ids:
            i = int(i)
            if i == EOS_ID:
                break
            if i in (PAD_ID, BOS_ID):
                continue
            out.append(self.words[i] if 0 <= i < len(self.words) else UNK)
        text = ""
        for k, tok in enumerate(out):
            prev = out[k - 1] if k else ""
            nxt = out[k + 1] if k + 1 < len(out) else ""
            glue = (
                not text
                or (tok.isdigit() and prev.isdigit())
                or (tok in {".", ":"} and prev.isdigit() and nxt.isdigit())
                or (tok.isdigit() and prev in {".", ":"} and k >= 2 and out[k - 2].isdigit())
                or tok == "-" or prev == "-"
                or tok in _NO_SPACE_BEFORE
            )
            text += tok if glue else " " + tok
        return text

    def state_dict(self) -> dict:
        """JSON-able state (the vocabulary in id order)."""
        return {"version": self.VERSION, "words": list(self.words)}

    @classmethod
    def from_state(cls, state: dict) -> "Tokenizer":
        """Rebuild from ``state_dict()`` output; ValueError on an unknown version or a bad vocabulary."""
        if (not isinstance(state, dict) or state.get("version") != cls.VERSION
                or not isinstance(state.get("words"), list)):
            raise ValueError("tokenizer state is not a version-1 vocabulary")
        return cls(state["words"])
