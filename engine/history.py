"""Fast reading of a whole events.jsonl: a million step events open in seconds, not a minute.

Why not ``json.loads`` per line: on the 2-core CI box a 300-byte step line
costs ~19 µs of CPU through ``events.from_json`` (decode, a dict, then
``from_dict``) — over 20 s for a run of 1,000,000 steps. Much of that is
building dicts; parsing a 17-digit float costs ~0.5 µs wherever it happens.

What this does instead. Lines of one event type written by ``events.to_json``
all have the same *skeleton*: identical bytes once the numeric values are cut
out (keys, punctuation, ``true``/``false``/``null``, strings). For each event
type with many lines in a chunk of the file, numpy finds every value span (a
number, or a quoted ``"nan"``/``"inf"``/``"-inf"``, after a ``:``), takes the
most common skeleton as the template, checks the other lines byte for byte
against it, and parses the values of the lines that match in one
``np.fromstring`` call. Those events are kept as columns (a float64 row per
event) and become ``Event`` objects only when indexed or iterated. Every line
that does not match (torn, another shape, a rare type) goes through the
ordinary json path. The events equal ``events.from_json`` line by line
(tested), the one difference being in kind, not value: a top-level float
field written as an int literal comes back as a float.

Measured (bench/open_run.py, CPU time on the CI box): ~6.6 µs per event to
open vs ~19 µs per line for ``from_json``; ``History.column`` then hands a
plot a field of a million steps in tens of milliseconds, without objects.

Cost: 16 MiB of the file in memory at a time plus numpy temporaries (~10× that
while a chunk is parsed), then 8 bytes per value kept. Torch-free (numpy only).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from engine import events as ev

#: Bytes of the file decoded per chunk (a chunk always ends at a line end).
CHUNK_BYTES = 16 << 20
#: Lines of one type in a chunk before the vectorised path is used (below, plain json is as fast).
MIN_BLOCK = 64
#: Templates tried per type and chunk (a second shape, e.g. a component that appeared later).
MAX_TEMPLATES = 3
#: Ints beyond this lose precision in float64; such rows go through json.
_EXACT_INT = 2 ** 53
_INF = float("inf")

_PREFIX = b'{"type":"'
_NL, _COLON, _QUOTE = 10, 58, 34
_NUM_START = np.zeros(256, bool)
_NUM_START[list(b"0123456789-")] = True
_DELIM = np.zeros(256, bool)  # bytes that end a scalar value
_DELIM[list(b",}]\n")] = True
_TO_SPACE = _DELIM.copy()  # bytes turned into separators before np.fromstring
_TO_SPACE[_QUOTE] = True


# ---------------------------------------------------------------- event construction

@dataclasses.dataclass(frozen=True)
class _Kind:
    """What a fast constructor needs to know about one event class."""

    cls: type
    names: frozenset
    float_fields: tuple
    int_fields: frozenset


def _kind_of(cls: type) -> _Kind:
    fields = dataclasses.fields(cls)
    floats = tuple(f.name for f in fields if f.type in ("float", "float | None"))
    ints = frozenset(f.name for f in fields if f.type in ("int", "int | None"))
    return _Kind(cls, frozenset(f.name for f in fields), floats, ints)


_KINDS: dict[str, _Kind] = {name: _kind_of(cls) for name, cls in ev.EVENT_TYPES.items()}


def build_event(record: Any) -> ev.Event | None:
    """``events.from_dict`` with a fast path: a record with exactly the class's fields skips ``__init__``.

    The frozen dataclasses have no ``__post_init__``, so setting ``__dict__``
    directly builds the same object (equal under ``==``) for a tenth of the cost.
    """
    if not isinstance(record, dict):
        return None
    kind = _KINDS.get(record.get("type", ""))  # type: ignore[arg-type]
    if kind is None:
        return None
    body = {k: v for k, v in record.items() if k != "type"}
    if body.keys() != kind.names:
        try:
            return ev.from_dict(record)
        except TypeError:
            return None
    for name in kind.float_fields:
        value = body[name]
        if isinstance(value, str) and value in ev._SPECIAL_FLOATS:
            body[name] = ev._SPECIAL_FLOATS[value]
    obj = kind.cls.__new__(kind.cls)
    object.__setattr__(obj, "__dict__", body)
    return obj


def parse_line(line: bytes | str) -> ev.Event | None:
    """One events.jsonl line to an event; None for torn, garbage or unknown lines."""
    try:
        record = json.loads(line)
    except (ValueError, TypeError):
        return None
    try:
        return build_event(record)
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------- columnar blocks

class _Block:
    """Events of one type and one skeleton: the template record and a float64 row of values per event."""

    def __init__(self, kind: _Kind, template: dict, paths: list[tuple], int_paths: np.ndarray,
                 values: np.ndarray) -> None:
        self.template = template
        self.type = template["type"]
        self.kind = kind
        self.paths = paths
        self.values = values
        self._ints = np.flatnonzero(int_paths).tolist()
        # from_dict turns "nan"/"inf" back into floats only for top-level float fields; elsewhere they stay
        # strings. Columns hold floats, so those other places get the string back when not finite.
        self._as_text = [i for i, p in enumerate(paths) if not (len(p) == 1 and p[0] in kind.float_fields)]
        self._top = [(i, p[0]) for i, p in enumerate(paths) if len(p) == 1]
        self._nested = [(i, p) for i, p in enumerate(paths) if len(p) > 1]
        # Nested dicts on the way to a value must be copied per event (events must not share dicts).
        self._parents = sorted({p[:i] for p in paths for i in range(1, len(p))}, key=len)
        self.column_of = {".".join(map(str, p)): i for i, p in enumerate(paths)}
        self._body = {k: v for k, v in template.items() if k != "type"}
        # Lists in the template (skeleton constants) would be shared between events: copy deeply then.
        self._deep = _has_list(template)
        self._exact = self._body.keys() == kind.names

    def event(self, row: int) -> ev.Event | None:
        """The event in row ``row``, equal to what ``events.from_json`` makes of its line."""
        values = self.values[row].tolist()
        for i in self._ints:
            values[i] = int(values[i])
        for i in self._as_text:
            v = values[i]
            if v != v or v == _INF or v == -_INF:
                values[i] = repr(v)
        body = copy.deepcopy(self._body) if self._deep else dict(self._body)
        for parent in self._parents:
            holder = body
            for key in parent[:-1]:
                holder = holder[key]
            holder[parent[-1]] = dict(holder[parent[-1]])
        for i, key in self._top:
            body[key] = values[i]
        for i, path in self._nested:
            holder = body
            for key in path[:-1]:
                holder = holder[key]
            holder[path[-1]] = values[i]
        if not self._exact:  # other fields than the class has: from_dict's rules (defaults, ignore unknown)
            return build_event({"type": self.type, **body})
        obj = self.kind.cls.__new__(self.kind.cls)
        object.__setattr__(obj, "__dict__", body)
        return obj


def _has_list(obj: Any) -> bool:
    if isinstance(obj, list):
        return True
    return isinstance(obj, dict) and any(_has_list(v) for v in obj.values())


def _leaves(record: dict, kind: _Kind) -> tuple[list[tuple], list[bool], list[float]] | None:
    """Value paths of a template in byte order, which of them are ints, and their values.

    None when a leaf cannot be carried by the columnar path (a non-special
    string would be part of the skeleton and is fine; a huge int is not).
    """
    paths: list[tuple] = []
    ints: list[bool] = []
    values: list[float] = []

    def walk(obj: Any, path: tuple) -> bool:
        if isinstance(obj, dict):
            return all(walk(v, path + (k,)) for k, v in obj.items())
        if isinstance(obj, list):
            return True  # numbers inside lists follow ',' not ':': they are skeleton bytes
        if isinstance(obj, bool) or obj is None:
            return True
        if isinstance(obj, (int, float)) or (isinstance(obj, str) and obj in ev._SPECIAL_FLOATS):
            if isinstance(obj, int) and abs(obj) >= _EXACT_INT:
                return False
            top = path[0]
            if len(path) == 1 and top in kind.int_fields:
                is_int = True
            elif len(path) == 1 and top in kind.float_fields:
                is_int = False
            else:
                is_int = isinstance(obj, int)
            paths.append(path)
            ints.append(is_int)
            values.append(ev._SPECIAL_FLOATS[obj] if isinstance(obj, str) else float(obj))
            return True
        return True  # other strings: skeleton

    body = {k: v for k, v in record.items() if k != "type"}
    if not walk(body, ()):
        return None
    return paths, ints, values


def _parse_numbers(text: bytes) -> np.ndarray | None:
    """Whitespace-separated numbers to float64 in one C call; None if any token is not a number."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            return np.fromstring(text, dtype=np.float64, sep=" ")
        except (ValueError, DeprecationWarning):
            return None


def _gather(c: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """The bytes c[starts[i]:stops[i]] for every i, concatenated (one fancy index, no Python loop)."""
    lengths = stops - starts
    if not len(lengths):
        return c[:0].copy()
    out_start = np.cumsum(lengths) - lengths
    return c[np.arange(int(lengths.sum())) + np.repeat(starts - out_start, lengths)]


class _Chunk:
    """Value spans and per-line facts of one chunk of complete lines."""

    def __init__(self, c: np.ndarray) -> None:
        self.c = c
        self.ends = np.flatnonzero(c == _NL)
        self.starts = np.empty_like(self.ends)
        if len(self.ends):
            self.starts[0] = 0
            self.starts[1:] = self.ends[:-1] + 1
        self.lens = self.ends - self.starts + 1  # including the newline
        self._spans()

    def _spans(self) -> None:
        c, n = self.c, len(self.c)
        colons = np.flatnonzero(c == _COLON)
        vs = colons + 1  # never past the end: the chunk ends with a newline
        first = c[vs]
        numeric = _NUM_START[first]
        delims = np.flatnonzero((c == 44) | (c == 125) | (c == 93) | (c == _NL))  # , } ] newline (a LUT is slower)
        ve = delims[np.searchsorted(delims, vs)]
        quoted = np.flatnonzero(first == _QUOTE)
        if len(quoted):  # "nan" / "inf" / "-inf", exactly (5 or 6 bytes with the quotes)
            q, qe = vs[quoted], ve[quoted]
            g = c[np.minimum(q[:, None] + np.arange(6), n - 1)]
            nan = (qe - q == 5) & (g[:, 1] == ord("n")) & (g[:, 2] == ord("a")) & (g[:, 3] == ord("n")) & \
                (g[:, 4] == _QUOTE)
            inf = (qe - q == 5) & (g[:, 1] == ord("i")) & (g[:, 2] == ord("n")) & (g[:, 3] == ord("f")) & \
                (g[:, 4] == _QUOTE)
            ninf = (qe - q == 6) & (g[:, 1] == ord("-")) & (g[:, 2] == ord("i")) & (g[:, 3] == ord("n")) & \
                (g[:, 4] == ord("f")) & (g[:, 5] == _QUOTE)
            numeric[quoted[nan | inf | ninf]] = True
        vs, ve = vs[numeric], ve[numeric]
        if len(vs) > 1:  # a span starting inside another (a ':' inside a string): drop it; that line won't match
            prev_end = np.maximum.accumulate(ve)
            keep = np.ones(len(vs), bool)
            keep[1:] = vs[1:] >= prev_end[:-1]
            vs, ve = vs[keep], ve[keep]
        self.vs, self.ve = vs, ve
        self.span_line = np.searchsorted(self.ends, vs)
        nlines = len(self.ends)
        self.nvals = np.bincount(self.span_line, minlength=nlines)
        self.vbytes = np.bincount(self.span_line, weights=ve - vs, minlength=nlines).astype(np.int64)
        self.skeleton_len = self.lens - self.vbytes
        # Byte mask of the value spans: alternate runs of False/True, one np.repeat (a cumsum of ±1
        # marks does the same at ~4x the cost).
        bounds = np.empty(2 * len(vs) + 2, np.int64)
        bounds[0], bounds[-1] = 0, n
        bounds[1:-1:2], bounds[2:-1:2] = vs, ve
        runs = np.zeros(2 * len(vs) + 1, bool)
        runs[1::2] = True
        self.in_value = np.repeat(runs, np.diff(bounds))

    def line_types(self) -> tuple[np.ndarray, np.ndarray]:
        """(type name per line as bytes S24, valid mask) for lines that start with {"type":"<name>"."""
        c, st, n = self.c, self.starts, len(self.c)
        ok = self.lens > len(_PREFIX) + 2
        g = c[np.minimum(st[:, None] + np.arange(len(_PREFIX)), n - 1)]
        ok &= (g == np.frombuffer(_PREFIX, np.uint8)).all(1)
        width = 24
        names = c[np.minimum(st[:, None] + len(_PREFIX) + np.arange(width + 1), n - 1)]
        is_quote = names == _QUOTE
        name_len = np.where(is_quote.any(1), is_quote.argmax(1), width + 1)
        ok &= name_len <= width
        names = names[:, :width].copy()
        names[np.arange(width)[None, :] >= name_len[:, None]] = 0
        return names.view(f"S{width}").ravel(), ok

    def _few(self, lines: np.ndarray) -> bool:
        # Few lines: gather their byte ranges (cost ∝ their bytes). Many: one mask over the chunk
        # (cost ∝ the chunk, but no int64 index per byte).
        return len(lines) * 4 < len(self.ends)

    def _spans_of(self, lines: np.ndarray) -> np.ndarray:
        flag = np.zeros(len(self.ends), bool)
        flag[lines] = True
        return flag[self.span_line]

    def match(self, lines: np.ndarray, template_line: int) -> np.ndarray:
        """Which of ``lines`` have the template line's skeleton, byte for byte."""
        L, k = self.skeleton_len[template_line], self.nvals[template_line]
        cand = lines[(self.skeleton_len[lines] == L) & (self.nvals[lines] == k)]
        if not len(cand):
            return cand
        if self._few(cand):  # the gaps between values, line by line
            pick = self._spans_of(cand)
            starts = np.sort(np.concatenate([self.starts[cand], self.ve[pick]]))
            stops = np.sort(np.concatenate([self.vs[pick], self.ends[cand] + 1]))
            skel = _gather(self.c, starts, stops).reshape(len(cand), L)
        else:
            flag = np.zeros(len(self.ends), bool)
            flag[cand] = True
            skel = self.c[np.repeat(flag, self.lens) & ~self.in_value].reshape(len(cand), L)
        row = int(np.searchsorted(cand, template_line))
        return cand[(skel == skel[row]).all(1)]

    def values(self, lines: np.ndarray, k: int) -> np.ndarray | None:
        """The k values of each of ``lines`` (which all match one template), as a (len, k) array."""
        if self._few(lines):  # each value with its delimiter, which becomes the separator
            pick = self._spans_of(lines)
            data = _gather(self.c, self.vs[pick], self.ve[pick] + 1)
        else:
            flag = np.zeros(len(self.ends), bool)
            flag[lines] = True
            take = self.in_value.copy()
            take[self.ve] = True  # keep each value's delimiter as its separator
            data = self.c[np.repeat(flag, self.lens) & take]
        data[_TO_SPACE[data]] = 32
        out = _parse_numbers(data.tobytes())
        if out is None or len(out) != len(lines) * k:
            return None
        return out.reshape(len(lines), k)

    def line(self, i: int) -> bytes:
        """The raw bytes of line i (without the newline)."""
        return self.c[self.starts[i]:self.ends[i]].tobytes()


# ---------------------------------------------------------------- the history

class History(Sequence):
    """Every event of a run in file order; looks like a list of ``Event``.

    Columnar events become objects when indexed or iterated (~3 µs each);
    ``column()`` gives a field of one event type as a numpy array without
    building any object, which is what a plot wants.
    """

    def __init__(self) -> None:
        self._blocks: list[_Block] = []
        self._objects: list[ev.Event] = []
        self._where: np.ndarray = np.zeros(0, np.int32)  # block index, or -1 for an object
        self._row: np.ndarray = np.zeros(0, np.int64)  # row in that block, or index into _objects
        self._parts: list[tuple[np.ndarray, np.ndarray]] = []
        self._columns: dict[tuple[str, str], np.ndarray] = {}
        #: File offset just past the last complete line read (where a follower continues).
        self.offset = 0
        #: Lines skipped as torn, garbage or of an unknown type.
        self.skipped = 0

    # Sequence protocol ------------------------------------------------------
    def __len__(self) -> int:
        self._seal()
        return len(self._where)

    def __getitem__(self, index):  # type: ignore[override]
        self._seal()
        if isinstance(index, slice):
            return [self._get(i) for i in range(*index.indices(len(self._where)))]
        if index < 0:
            index += len(self._where)
        if not 0 <= index < len(self._where):
            raise IndexError("history index out of range")
        return self._get(index)

    def __iter__(self) -> Iterator[ev.Event]:
        self._seal()
        blocks, objects = self._blocks, self._objects
        for b, r in zip(self._where.tolist(), self._row.tolist()):
            yield objects[r] if b < 0 else blocks[b].event(r)

    def _get(self, i: int) -> ev.Event:
        b = int(self._where[i])
        if b < 0:
            return self._objects[int(self._row[i])]
        return self._blocks[b].event(int(self._row[i]))  # type: ignore[return-value]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (History, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, so unhashable like them

    def __repr__(self) -> str:
        return f"<History {len(self)} events, {len(self._blocks)} columnar blocks>"

    # Columns ----------------------------------------------------------------
    def others(self, event_type: str) -> list[ev.Event]:
        """Every event not of ``event_type``, in file order, building no object of that type.

        A viewer takes the step events of a long run from ``column()`` and folds
        only the rest as objects: at 1M steps that skips ~1M object builds.
        """
        self._seal()
        skip = np.array([blk.type == event_type for blk in self._blocks] + [False])  # [-1]: the objects
        keep = np.flatnonzero(~skip[self._where])
        return [e for e in (self._get(int(i)) for i in keep) if e.type != event_type]

    def count_type(self, event_type: str) -> int:
        """Number of events of one type (e.g. "step")."""
        self._seal()
        total = sum(int((self._where == b).sum()) for b, blk in enumerate(self._blocks) if blk.type == event_type)
        return total + sum(1 for o in self._objects if o.type == event_type)

    def column(self, event_type: str, name: str) -> np.ndarray:
        """One numeric field of every event of a type, in file order (NaN where absent/None).

        ``name`` is a field (``"loss"``) or a dotted path into a dict field
        (``"components.mse"``).
        """
        key = (event_type, name)
        if key in self._columns:
            return self._columns[key]
        self._seal()
        order_parts, value_parts = [], []
        for b, blk in enumerate(self._blocks):
            if blk.type != event_type:
                continue
            idx = np.flatnonzero(self._where == b)
            col = blk.column_of.get(name)
            order_parts.append(idx)
            if col is not None:
                value_parts.append(blk.values[self._row[idx], col])
            else:  # a constant of the template (a bool, a None) or absent: the same for every row
                value_parts.append(np.full(len(idx), _field(blk.template, name)))
        obj_idx = np.flatnonzero(self._where < 0)
        picked = [(int(i), self._objects[int(self._row[i])]) for i in obj_idx]
        picked = [(i, o) for i, o in picked if o.type == event_type]
        if picked:
            order_parts.append(np.array([i for i, _ in picked], np.int64))
            value_parts.append(np.array([_field(o, name) for _, o in picked], np.float64))
        if not order_parts:
            out = np.zeros(0)
        else:
            order = np.concatenate(order_parts)
            out = np.concatenate(value_parts)[np.argsort(order, kind="stable")]
        self._columns[key] = out
        return out

    # Building ---------------------------------------------------------------
    def _add_block(self, block: _Block, line_ids: np.ndarray) -> None:
        self._blocks.append(block)
        b = len(self._blocks) - 1
        self._parts.append((line_ids, np.stack([np.full(len(line_ids), b), np.arange(len(line_ids))])))

    def _add_objects(self, line_ids: list[int], objs: list[ev.Event]) -> None:
        if not objs:
            return
        start = len(self._objects)
        self._objects.extend(objs)
        ids = np.array(line_ids, np.int64)
        self._parts.append((ids, np.stack([np.full(len(ids), -1), np.arange(start, start + len(ids))])))

    def _seal(self) -> None:
        """Merge the per-chunk parts into file order (once, when reading is done)."""
        if not self._parts:
            return
        ids = np.concatenate([p[0] for p in self._parts])
        where_row = np.concatenate([p[1] for p in self._parts], axis=1)
        order = np.argsort(ids, kind="stable")
        self._where = where_row[0][order].astype(np.int32)
        self._row = where_row[1][order].astype(np.int64)
        self._parts = []
        self._columns = {}


def _field(event: Any, name: str) -> float:
    value: Any = event
    for part in name.split("."):
        value = value.get(part) if isinstance(value, dict) else getattr(value, part, None)
        if value is None:
            return float("nan")
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _decode_chunk(history: History, data: bytes, first_line: int, min_block: int = MIN_BLOCK) -> int:
    """Add the events of ``data`` (complete lines) to ``history``; returns the number of lines."""
    c = np.frombuffer(data, np.uint8)
    chunk = _Chunk(c)
    nlines = len(chunk.ends)
    done = np.zeros(nlines, bool)
    names, typed = chunk.line_types()
    kinds, inverse, counts = np.unique(names, return_inverse=True, return_counts=True)
    for k, name in enumerate(kinds):
        type_name = name.decode("ascii", "replace")
        if counts[k] < min_block or type_name not in _KINDS:
            continue
        todo = np.flatnonzero((inverse == k) & typed)
        for _ in range(MAX_TEMPLATES):
            if len(todo) < min_block:
                break
            # The most common (skeleton length, value count) is the template's shape.
            shape = chunk.skeleton_len[todo] * 1_000_003 + chunk.nvals[todo]
            uniq, first, cnt = np.unique(shape, return_index=True, return_counts=True)
            template_line = int(todo[first[int(cnt.argmax())]])
            matched = _block_for(history, chunk, todo, template_line, first_line)
            if matched is None or not len(matched):
                break
            done[matched] = True
            todo = todo[~done[todo]]
    rest = np.flatnonzero(~done)
    objs, ids = [], []
    for i in rest.tolist():
        event = parse_line(chunk.line(i))
        if event is None:
            if chunk.lens[i] > 1:  # a blank line is not worth counting
                history.skipped += 1
            continue
        objs.append(event)
        ids.append(first_line + i)
    history._add_objects(ids, objs)
    return nlines


def _block_for(history: History, chunk: _Chunk, todo: np.ndarray, template_line: int,
               first_line: int) -> np.ndarray | None:
    """Parse the lines of ``todo`` that match the template into a block; returns their line indices."""
    try:
        record = json.loads(chunk.line(template_line))
    except ValueError:
        return None
    if not isinstance(record, dict) or build_event(record) is None:
        return None
    kind = _KINDS[record["type"]]
    leaves = _leaves(record, kind)
    if leaves is None:
        return None
    paths, ints, expect = leaves
    k = int(chunk.nvals[template_line])
    if len(paths) != k:
        return None  # a ':'-digit inside a string fooled the span finder: leave this type to json
    matched = chunk.match(todo, template_line)
    if not len(matched):
        return None
    values = chunk.values(matched, k)
    if values is None:
        return None
    # The template's own row must read back as json read it (guards the path ↔ column mapping).
    row = values[int(np.searchsorted(matched, template_line))]
    if not np.array_equal(row, np.array(expect), equal_nan=True):
        return None
    int_mask = np.array(ints, bool)
    if int_mask.any():  # an int field holding a fraction or a huge value: json decides for that row
        iv = values[:, int_mask]
        good = ((iv == np.round(iv)) & (np.abs(iv) < _EXACT_INT)).all(1)
        matched, values = matched[good], values[good]
    history._add_block(_Block(kind, record, paths, int_mask, values), matched + first_line)
    return matched


def read_history(path: Path | str, chunk_bytes: int = CHUNK_BYTES, end: int | None = None,
                 min_block: int = MIN_BLOCK) -> History:
    """Every complete line of an events.jsonl (up to ``end`` bytes); a torn last line is left unread.

    A missing file is an empty history. ``History.offset`` says where a
    follower should continue reading.
    """
    history = History()
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        return history
    with handle:
        carry = b""
        offset = 0
        line_no = 0
        limit = end
        while True:
            want = chunk_bytes if limit is None else min(chunk_bytes, limit - offset - len(carry))
            data = handle.read(want) if want > 0 else b""
            if not data:
                break
            buf = carry + data
            cut = buf.rfind(b"\n")
            if cut < 0:
                carry = buf
                continue
            complete, carry = buf[:cut + 1], buf[cut + 1:]
            line_no += _decode_chunk(history, complete, line_no, min_block)
            offset += len(complete)
        history.offset = offset
    history._seal()
    return history
