"""The LM's data: a corpus read once, tokenized once, packed into one deterministic token stream.

Sources (``data.path``): a UTF-8 text file, a directory of text files (every
regular file under it, sorted by relative path, hidden ones skipped), or a
JSONL file (``.jsonl``/``.ndjson``) whose records hold their text in
``lm.text_field``. Without a path the demo reads Python's own
standard-library sources (present wherever the engine itself runs), in
sorted file order, up to ``lm.corpus_bytes``.

Each document is tokenized and followed by an end-of-document token; the
documents are concatenated into one stream (no padding, no sample ever
shorter than ``seq_len``). The first ``1 - val_fraction`` of the stream
trains and the tail validates. Sample ``i`` is the window of ``seq_len + 1``
tokens starting at ``i · seq_len``: a pure function of ``i``, so the
engine's resumable sample order gives exact resume with no RNG to replay.
The stream's sha256 goes into the task state, so a resume onto a corpus that
changed since the checkpoint is refused instead of silently training on
other data.

Bad input raises ``TaskError`` naming the file (and line, for JSONL):
missing, empty, binary (a NUL byte or invalid UTF-8), or too short for one
training and one validation window.
"""

from __future__ import annotations

import hashlib
import json
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from engine.tasks.protocol import TaskError

#: The byte tokenizer's vocabulary: one id per byte value. Id 0 (NUL, never in accepted text) ends a document.
BYTE_VOCAB = 256
BYTE_EOS = 0
JSONL_SUFFIXES = (".jsonl", ".ndjson")


def _decode(path: Path, raw: bytes) -> str:
    if b"\x00" in raw:
        raise TaskError(f"data.path: {path}: binary file (contains NUL bytes); expected UTF-8 text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise TaskError(f"data.path: {path}:{line}: not UTF-8 text (binary file?)") from None


def _read_jsonl(path: Path, field: str, raw: bytes) -> list[str]:
    text = _decode(path, raw)
    docs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise TaskError(f"data.path: {path}:{number}: invalid JSON ({exc.msg})") from None
        value = record.get(field) if isinstance(record, dict) else None
        if not isinstance(value, str):
            raise TaskError(f"data.path: {path}:{number}: no string field {field!r} (lm.text_field)")
        docs.append(value)
    return docs


def read_documents(path: str | None, text_field: str, corpus_bytes: int) -> tuple[list[str], str]:
    """(documents, where they came from) for ``data.path``, or the stdlib demo corpus when path is None."""
    if path is None:
        return _stdlib_documents(corpus_bytes), "python stdlib sources"
    root = Path(path).expanduser()
    if root.is_dir():
        files = sorted(p for p in root.rglob("*") if p.is_file()
                       and not any(part.startswith(".") for part in p.relative_to(root).parts))
        if not files:
            raise TaskError(f"data.path: {root}: directory holds no files")
    elif root.is_file():
        files = [root]
    else:
        raise TaskError(f"data.path: {root}: no such file or directory")
    docs: list[str] = []
    for file in files:
        try:
            raw = file.read_bytes()
        except OSError as exc:
            raise TaskError(f"data.path: {file}: {exc.strerror or exc}") from None
        if file.suffix.lower() in JSONL_SUFFIXES:
            docs.extend(_read_jsonl(file, text_field, raw))
        else:
            docs.append(_decode(file, raw))
    docs = [d for d in docs if d.strip()]
    if not docs:
        raise TaskError(f"data.path: {root}: corpus is empty (no text)")
    return docs, str(root)


def _stdlib_documents(limit: int) -> list[str]:
    """Python's own standard-library modules, sorted by name, until ``limit`` bytes."""
    root = Path(sysconfig.get_paths()["stdlib"])
    docs, total = [], 0
    for file in sorted(root.glob("*.py")):
        try:
            text = file.read_text("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        docs.append(text)
        total += len(text)
        if total >= limit:
            break
    if not docs:  # a stripped interpreter (.pyc only): say so rather than train on nothing
        raise TaskError(f"data.path: not set and {root} holds no .py sources; give a text corpus with --data")
    return docs


@dataclass
class TokenStream:
    """The packed stream split into train and validation windows of ``seq_len + 1`` tokens."""

    train: np.ndarray
    val: np.ndarray
    seq_len: int
    digest: str

    @classmethod
    def build(cls, docs: list[str], encode: Callable[[str], "np.ndarray | list[int]"], eos: int, seq_len: int,
              val_fraction: float, where: str) -> "TokenStream":
        """Tokenize, append ``eos`` to each document, concatenate and split; TaskError if too short."""
        parts = [np.asarray(encode(d), dtype=np.int64) for d in docs]
        stream = np.concatenate([np.append(p, eos) for p in parts]).astype(np.int32)
        cut = int(len(stream) * (1 - val_fraction))
        out = cls(stream[:cut], stream[cut:], seq_len, hashlib.sha256(stream.tobytes()).hexdigest())
        if out.train_windows() < 1 or out.val_windows() < 1:
            raise TaskError(f"data.path: {where}: {len(stream):,} tokens are too few for one training and one "
                            f"validation window of lm.seq_len={seq_len} (need about "
                            f"{int((seq_len + 1) / min(val_fraction, 1 - val_fraction)):,})")
        return out

    def train_windows(self) -> int:
        """Training samples: whole windows in the training part."""
        return max(0, (len(self.train) - 1) // self.seq_len)

    def val_windows(self) -> int:
        """Validation samples: whole windows in the held-out tail."""
        return max(0, (len(self.val) - 1) // self.seq_len)

    def window(self, index: int, train: bool) -> np.ndarray:
        """Tokens ``[i·T, i·T + T]`` (T + 1 of them: inputs and their next-token targets)."""
        part = self.train if train else self.val
        start = index * self.seq_len
        return part[start: start + self.seq_len + 1]

    def with_seq_len(self, seq_len: int) -> "TokenStream":
        """The same stream cut into windows of another length."""
        return TokenStream(self.train, self.val, seq_len, self.digest)


def byte_encode(text: str) -> np.ndarray:
    """UTF-8 bytes as token ids (0..255)."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
