"""Reading a whole events.jsonl fast into a History: chunks read by position, step lines decoded together.

How the store is filled (engine.run.history.store keeps it): per chunk of
complete lines (``CHUNK_BYTES``), numpy finds the line ends and the step lines;
consecutive step lines are decoded in one msgspec call into typed rows, which
become float64 columns; every other line becomes an Event (``parse_lines``). A
viewer with the run's step record leaves the step lines out (``steps=False``).
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import msgspec
import numpy as np

from engine.core.safe_files import open_regular
from engine.run import events as ev
from engine.run.history.store import (
    CHUNK_BYTES,
    STEP_FIELDS,
    STEP_PREFIX,
    History,
    decode_together,
    line_prefix,
    parse_lines,
    parse_lines_of,
)

_NAN = float("nan")


_STRUCT_TYPES = {"float": float, "int": int, "bool": bool, "dict": dict[str, float]}


def _step_struct() -> type:
    """A msgspec struct mirroring StepLogged's fields, typed so a row decodes without any Python code."""
    spec = []
    for f in dataclasses.fields(ev.StepLogged):
        default = msgspec.field(default_factory=f.default_factory) \
            if f.default_factory is not dataclasses.MISSING else f.default
        spec.append((f.name, _STRUCT_TYPES.get(f.type, Any), default))
    return msgspec.defstruct("StepRow", spec, gc=False)


_StepRow = _step_struct()
_ROWS = msgspec.json.Decoder(list[_StepRow], strict=False)
_ROW = msgspec.json.Decoder(_StepRow, strict=False)


def _rows_to_columns(rows: list) -> dict[str, np.ndarray]:
    """Decoded step rows to float64 columns: the numeric fields and ``components.<name>`` (NaN where absent)."""
    n = len(rows)
    out = {name: np.fromiter(map(operator.attrgetter(name), rows), np.float64, n) for name in STEP_FIELDS}
    comps = list(map(operator.attrgetter("components"), rows))
    names = set().union(*comps)  # C-level: ~50 ns a row
    order = [k for k in {**comps[0], **comps[-1]} if k in names] + sorted(names - comps[0].keys() - comps[-1].keys())
    for key in order:
        out[f"components.{key}"] = np.fromiter(map(operator.methodcaller("get", key, _NAN), comps), np.float64, n)
    return out


def _decode_steps(buf: bytes, starts: np.ndarray, ends: np.ndarray, lines: np.ndarray) -> list:
    """The step rows of ``lines`` (indices into starts/ends), one call for all; None for a line that failed."""
    if not len(lines):
        return []
    breaks = np.flatnonzero(np.diff(lines) != 1) + 1
    firsts = np.concatenate(([0], breaks)).tolist()
    lasts = np.concatenate((breaks - 1, [len(lines) - 1])).tolist()
    s, e, ln = starts.tolist(), ends.tolist(), lines.tolist()
    parts = [buf[s[ln[a]]:e[ln[b]]].replace(b"\n", b",") for a, b in zip(firsts, lasts)]
    try:
        rows = _ROWS.decode(b"[" + b",".join(parts) + b"]")
        if len(rows) == len(ln):
            return rows
    except msgspec.DecodeError:
        pass
    out = []
    for i in ln:  # a torn or odd line in this chunk: one by one, so only that line leaves the fast path
        try:
            out.append(_ROW.decode(buf[s[i]:e[i]]))
        except msgspec.DecodeError:
            out.append(None)
    return out


class _Heads:
    """The first ``width`` bytes of every line of a chunk as 8-byte words, gathered once: which lines begin with
    a prefix, in a few word compares a line (a byte-wise gather and compare cost ~10x more: a 100M-step log
    has a million lines)."""

    def __init__(self, c: np.ndarray, starts: np.ndarray, ends: np.ndarray, width: int) -> None:
        self.lengths = ends - starts
        n = len(c)
        # The words of the last few lines may pass the chunk's end: those are read from a zero-padded copy of it.
        tail_from = max(0, n - width - 8)
        tail = np.zeros(n - tail_from + width + 8, np.uint8)
        tail[:n - tail_from] = c[tail_from:]
        in_tail = np.ndarray((len(tail) - 7,), "<u8", tail, 0, (1,))  # element i: the 8 bytes from byte i
        in_chunk = np.ndarray((n - 7,), "<u8", c, 0, (1,)) if n >= 8 else in_tail
        self.words = []
        for k in range(-(-width // 8)):
            at = starts + 8 * k
            late = at > n - 8
            words = in_chunk[np.where(late, 0, at)]
            words[late] = in_tail[at[late] - tail_from]
            self.words.append(words)

    def starting_with(self, prefix: bytes) -> np.ndarray:
        """Indices of the lines that begin with ``prefix`` (at most the gathered width)."""
        ok = self.lengths >= len(prefix)
        padded = prefix + bytes(-len(prefix) % 8)
        for k in range(-(-len(prefix) // 8)):
            want = int.from_bytes(padded[8 * k:8 * k + 8], "little")
            mask = int.from_bytes(bytes(min(8, len(prefix) - 8 * k) * [255]).ljust(8, b"\0"), "little")
            ok &= (self.words[k] & np.uint64(mask)) == np.uint64(want)
        return np.flatnonzero(ok)


def _decode_chunk(history: History, buf, base: int, stop: int, steps: bool = True, origin: int = 0,
                  newest: list[_Newest] | None = None) -> None:
    """Add the events of the file's bytes ``[base, stop)`` (complete lines; ``buf`` holds the file from offset
    ``origin`` on) to ``history``; without ``steps`` the step lines are only counted
    (``History.steps_left_out``), not decoded; the lines of a type in ``newest`` are only noted there."""
    base, stop = base - origin, stop - origin  # positions in ``buf``; the history keeps offsets in the file
    c = np.frombuffer(buf, np.uint8, stop - base, base)
    ends = np.flatnonzero(c == 10) + base
    starts = np.empty_like(ends)
    if len(ends):
        starts[0] = base
        starts[1:] = ends[:-1] + 1
    prefixes = [STEP_PREFIX, *(kept.prefix for kept in newest or ())]
    heads = _Heads(c, starts - base, ends - base, max(map(len, prefixes)))
    step_lines = heads.starting_with(STEP_PREFIX)
    left_out = np.zeros(len(ends), bool)
    if not steps:
        history.steps_left_out += len(step_lines)
        left_out[step_lines] = True
        step_lines = step_lines[:0]
    for kept in newest or ():
        lines = heads.starting_with(kept.prefix)
        left_out[lines] = True
        kept.note(starts[lines] + origin, (ends - starts)[lines])
    rows = _decode_steps(buf, starts, ends, step_lines)
    good = [r for r in rows if r is not None]
    if len(good) < len(rows):
        step_lines = step_lines[np.array([r is not None for r in rows], bool)]
    is_row = np.zeros(len(ends), bool)
    is_row[step_lines] = True
    row_of = np.full(len(ends), -1, np.int64)
    row_of[is_row] = np.arange(len(good))
    keep = is_row.copy()
    objects: list[ev.Event] = []
    s, e = starts.tolist(), ends.tolist()
    lines = [i for i in np.flatnonzero(~is_row & ~left_out).tolist() if e[i] > s[i]]  # a blank line: not counted
    for i, event in zip(lines, parse_lines([buf[s[i]:e[i]] for i in lines])):
        if event is None:
            history.skipped += 1
            continue
        keep[i] = True
        row_of[i] = -1 - len(objects)
        objects.append(event)
    history.add_chunk(starts[keep] + origin, (ends - starts)[keep], row_of[keep],
                      _rows_to_columns(good) if good else None, objects)


class _Newest:
    """Where the newest ``n`` lines of one sampled type are, noted chunk by chunk (at most ``n`` held)."""

    def __init__(self, event_type: str, n: int) -> None:
        self.event_type, self.prefix, self.n = event_type, line_prefix(event_type), n
        self.seen = 0
        self.offsets = np.zeros(0, np.int64)
        self.lengths = np.zeros(0, np.int64)

    def note(self, offsets: np.ndarray, lengths: np.ndarray) -> None:
        self.seen += len(offsets)
        keep = slice(max(0, len(self.offsets) + len(offsets) - self.n), None)
        self.offsets = np.concatenate([self.offsets, offsets])[keep] if self.n else self.offsets
        self.lengths = np.concatenate([self.lengths, lengths])[keep] if self.n else self.lengths


def _add_newest(history: History, fd: int, newest: list[_Newest], chunk_bytes: int,
                columns: Mapping[str, Sequence[str]]) -> None:
    """Decode the noted newest lines of each sampled type into ``history``; count the ones left out. A type in
    ``columns`` has its noted lines decoded into those columns, and only its newest good line into an event."""
    for kept in newest:
        lines = _read_lines(fd, kept.offsets, kept.lengths, chunk_bytes)
        names = columns.get(kept.event_type)
        if names is None:
            at, events = np.arange(len(lines)), parse_lines_of(lines, kept.event_type)
        else:
            history.sample_columns[kept.event_type], dropped = _sample_columns(lines, names)
            history.skipped += dropped
            at, events = _newest_event(lines, kept.event_type)
        good = [i for i, e in enumerate(events) if e is not None]
        history.samples_left_out += kept.seen - len(events)
        history.skipped += len(events) - len(good)
        if good:
            history.add_chunk(kept.offsets[at[good]], kept.lengths[at[good]], -1 - np.arange(len(good)), None,
                              [events[i] for i in good])


def _newest_event(lines: list[bytes], event_type: str) -> tuple[np.ndarray, list[ev.Event]]:
    """(its index, [the event]) of the newest line that parses; ([], []) when none does."""
    for i in range(len(lines) - 1, -1, -1):
        event = parse_lines_of([lines[i]], event_type)[0]
        if event is not None:
            return np.array([i]), [event]
    return np.zeros(0, np.int64), []


def _sample_columns(lines: list[bytes], names: Sequence[str]) -> tuple[dict[str, np.ndarray], int]:
    """(the ``names`` fields of sample lines as float64 columns, NaN where a value is null; the lines left out).

    One msgspec call into a struct of just those fields skips the rest of each line: a long run's dashboard
    reads 65,536 memory samples, ~8x faster than as events (whose frozen dataclasses cost most of the
    decode). A batch the decode trips on (a torn line, a ``"nan"`` string) goes through one line at a time, and
    a line that still fails is left out, as ``parse_lines_of`` leaves out its event.
    """
    rows = decode_together(msgspec.json.Decoder(list[_sample_row(tuple(names), float)]), lines)
    if rows is None:
        one = msgspec.json.Decoder(_sample_row(tuple(names), float | str))
        rows = []
        for line in lines:
            try:
                rows.append(one.decode(line))
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
        return {name: np.array([_number(getattr(row, name)) for row in rows], np.float64)
                for name in names}, len(lines) - len(rows)
    return {name: np.array(list(map(operator.attrgetter(name), rows)), np.float64) for name in names}, 0  # None→NaN


def _number(value) -> float:
    """A sample field's value as a float: null and anything but a number or a special float's string are NaN."""
    if isinstance(value, str):
        return ev.SPECIAL_FLOATS.get(value, _NAN)
    return _NAN if value is None else value


@functools.cache
def _sample_row(names: tuple[str, ...], kind) -> type:
    """A msgspec struct of just ``names``, each a ``kind`` or null (the other fields of a line are skipped)."""
    return msgspec.defstruct("SampleRow", [(name, kind | None, None) for name in names], gc=False)


def _read_lines(fd: int, offsets: np.ndarray, lengths: np.ndarray, chunk_bytes: int) -> list[bytes]:
    """The lines at ``offsets`` (ascending), read a span of at most ~``chunk_bytes`` at a time."""
    ends = offsets + lengths
    out: list[bytes] = []
    i = 0
    while i < len(offsets):
        start = int(offsets[i])
        j = max(i + 1, int(np.searchsorted(ends, start + chunk_bytes, side="right")))
        span = os.pread(fd, int(ends[j - 1]) - start, start)
        out.extend(span[a - start:b - start] for a, b in zip(offsets[i:j].tolist(), ends[i:j].tolist()))
        i = j
    return out


def read_history(path: Path | str, chunk_bytes: int = CHUNK_BYTES, end: int | None = None,
                 steps: bool = True, newest: Mapping[str, int] | None = None,
                 columns: Mapping[str, Sequence[str]] | None = None) -> History:
    """Every complete line of an events.jsonl (up to ``end`` bytes); a torn last line is left unread.

    A missing file is an empty history. ``History.offset`` says where a follower should continue reading.
    ``steps=False`` leaves the step lines out (counted in ``History.steps_left_out``, never decoded): a viewer
    that reads a run's steps from its step record (engine.run.steps) needs only the other events, a few
    percent of an old log's lines and of its decoding. ``newest`` (event type → n) keeps only the events of the
    newest n lines of those types (in file order among the others; a torn line among them is skipped, not
    replaced by an older one); the rest are counted in ``History.samples_left_out``. A type of ``newest`` in
    ``columns`` (event type → field names) has its newest n lines read as those fields' columns instead
    (``History.sample_columns``: what a chart or a ring of them draws), and only its newest line as an event.
    """
    path = Path(path)
    history = History(path)
    try:
        handle = open_regular(path)  # a FIFO or a device in its place: OSError at once, never a hang
    except FileNotFoundError:
        return history
    offset = 0
    kept = [_Newest(kind, n) for kind, n in (newest or {}).items()]
    with handle:
        size = os.fstat(handle.fileno()).st_size if end is None else end
        # Read by position, a chunk at a time: a mapped log's pages would count in the viewer's resident memory
        # (a 2.6 GB log read whole looked like 2.6 GB of viewer), and a chunk is all the decoding needs.
        while offset < size:
            data = os.pread(handle.fileno(), min(chunk_bytes, size - offset), offset)
            cut = data.rfind(b"\n")
            while cut < 0 and offset + len(data) < size:  # a line longer than a chunk
                more = os.pread(handle.fileno(), min(chunk_bytes, size - offset - len(data)), offset + len(data))
                if not more:
                    break
                data += more
                cut = data.rfind(b"\n")
            if cut < 0:  # the torn tail
                break
            _decode_chunk(history, data, offset, offset + cut + 1, steps, origin=offset, newest=kept)
            offset += cut + 1
        history.offset = offset
        _add_newest(history, handle.fileno(), kept, chunk_bytes, columns or {})
    history.seal()
    return history
