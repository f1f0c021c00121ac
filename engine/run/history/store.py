"""The events of a run as a list-like History: step events as columns, every other event an object.

Why: a viewer opening a run with a million steps must not build a million
event objects. ``json.loads`` + ``events.from_dict`` costs ~11–19 µs a line on
the 2-core CI box (over 10 s at 1M steps); msgspec decodes the same line into
a typed struct in ~1 µs.

How, per chunk of complete lines (``CHUNK_BYTES``):

- numpy finds the line ends and the lines that start with ``{"type":"step",``
  (every step line ``events.to_json`` writes does);
- consecutive step lines are joined into one JSON array and decoded in one
  ``msgspec.json.Decoder(list[StepRow], strict=False)`` call (``strict=False``
  reads the writer's ``"nan"``/``"inf"`` strings as floats); if the chunk holds
  a torn or odd step line, its step lines are decoded one by one instead, and a
  line the typed struct rejects falls back to the object path;
- the rows become float64 columns (every numeric field, ``components.<name>``
  for each component) and the structs are dropped: 8 bytes a value are kept;
- every other line becomes an ``Event`` through ``parse_line`` (msgspec, then
  ``json.loads`` for what msgspec refuses, e.g. a ``NaN`` literal, so every
  line reads exactly as ``events.from_json`` reads it).

A step event is an *index entry* (byte offset and length in the file) plus a
row of the columns: ``History[i]`` re-reads and decodes its line on demand,
so the objects it hands out equal ``events.from_json``'s exactly (nested
``"nan"`` strings included) without keeping them.

Old runs: every record goes through ``migrate_record`` before it becomes an
event, the one place the schema-1 → current migration (engine.core.migrate, when
present) applies. Torch-free (numpy and msgspec only).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable, Iterator

import msgspec
import numpy as np

from engine.core import migrate
from engine.run import events as ev

#: Bytes of the file decoded per chunk (a chunk always ends at a line end).
CHUNK_BYTES = 16 << 20


def line_prefix(event_type: str) -> bytes:
    """What every line of ``event_type`` starts with (``events.to_json`` writes ``type`` first)."""
    return b'{"type":"%s",' % event_type.encode()


#: What every step line starts with.
STEP_PREFIX = line_prefix("step")
_NAN = float("nan")
#: Numeric StepLogged fields, each a column (bool ``skipped`` as 0/1).
STEP_FIELDS = tuple(f.name for f in dataclasses.fields(ev.StepLogged) if f.type in ("float", "int", "bool"))


# ---------------------------------------------------------------- records → events

#: Applied to every record before it becomes an event: older schemas' records become current ones.
migrate_record: Callable[[dict], dict] | None = migrate.migrate_record


@dataclasses.dataclass(frozen=True)
class _Kind:
    """What the fast constructor needs to know about one event class."""

    cls: type
    names: frozenset
    float_fields: tuple
    #: The class converts fields in ``__post_init__`` (RunStarted's typed budget): always build through it.
    slow: bool = False


def _kind_of(cls: type) -> _Kind:
    fields = dataclasses.fields(cls)
    return _Kind(cls, frozenset(f.name for f in fields),
                 tuple(f.name for f in fields if f.type in ("float", "float | None")),
                 hasattr(cls, "__post_init__"))


_KINDS: dict[str, _Kind] = {name: _kind_of(cls) for name, cls in ev.EVENT_TYPES.items()}


def build_event(record: Any) -> ev.Event | None:
    """``events.from_dict`` (after ``migrate_record``) with a fast path for a record with exactly the class's fields.

    For the frozen dataclasses without ``__post_init__``, setting ``__dict__``
    directly builds the same object (equal under ``==``) for a tenth of the cost.
    """
    if not isinstance(record, dict):
        return None
    if migrate_record is not None:
        record = migrate_record(record)
    kind = _KINDS.get(record.get("type", ""))  # type: ignore[arg-type]
    if kind is None:
        return None
    body = dict(record)  # (a C-level copy: a comprehension dropping "type" cost ~3x more)
    del body["type"]
    if kind.slow or body.keys() != kind.names:
        try:
            return ev.from_dict(record)
        except TypeError:
            return None
    for name in kind.float_fields:
        value = body[name]
        if isinstance(value, str) and value in ev.SPECIAL_FLOATS:
            body[name] = ev.SPECIAL_FLOATS[value]
    obj = kind.cls.__new__(kind.cls)
    object.__setattr__(obj, "__dict__", body)
    return obj


_ANY = msgspec.json.Decoder()


def parse_line(line: bytes | str) -> ev.Event | None:
    """One events.jsonl line to an event; None for torn, garbage or unknown lines."""
    try:
        record = _ANY.decode(line)
    except msgspec.DecodeError:
        try:  # what json accepts and msgspec does not (NaN literals): read as events.from_json would
            record = json.loads(line)
        except (ValueError, TypeError):
            return None
    try:
        return build_event(record)
    except (TypeError, ValueError):
        return None


def decode_together(decoder: msgspec.json.Decoder, lines: list[bytes]) -> list | None:
    """``lines`` decoded in one msgspec call as one JSON array (``decoder`` takes a list), or None when any line
    trips it (a torn line, a value its types do not take) or holds more than one value (which would shift every
    record after it): the caller then goes line by line."""
    try:
        records = decoder.decode(b"[" + b",".join(lines) + b"]")
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return records if len(records) == len(lines) else None


def parse_lines(lines: list[bytes]) -> list[ev.Event | None]:
    """``parse_line`` of many lines: one msgspec call for all of them when they decode as one JSON array.

    Any line the array decode trips on (a ``NaN`` literal, a torn line) sends them all through
    ``parse_line`` one by one, so the result is always exactly ``[parse_line(l) for l in lines]``.
    """
    records = decode_together(_ANY, lines)
    if records is None:
        return [parse_line(line) for line in lines]
    out: list[ev.Event | None] = []
    for record in records:
        try:
            out.append(build_event(record))
        except (TypeError, ValueError):
            out.append(None)
    return out


#: Samples taken on a clock, which no migration touches: lines of one of these types decode straight into its class.
_SAMPLE_DECODERS = {cls.type: msgspec.json.Decoder(list[cls]) for cls in (ev.MemorySampled, ev.SystemSampled,
                                                                          ev.RanksSampled)}


def parse_lines_of(lines: list[bytes], event_type: str) -> list[ev.Event | None]:
    """``parse_lines`` of lines that all hold one event type: a sample type decodes straight into its class in
    one msgspec call (~2x faster: a long run's dashboard reads 65,536 memory samples), strictly, so a value the
    class's types do not take exactly (a ``"nan"`` string, a torn line) sends the batch through ``parse_lines``
    and every event equals ``parse_line``'s."""
    decoder = _SAMPLE_DECODERS.get(event_type)
    events = None if decoder is None else decode_together(decoder, lines)
    return parse_lines(lines) if events is None else events


# ---------------------------------------------------------------- the history

class History(Sequence):
    """Every event of a run in file order; looks like a list of ``Event``.

    Step events live as columns (``column()``) and are decoded from the file
    when indexed or iterated (~3 µs each); the other events are objects.
    """

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = None if path is None else Path(path)
        self._objects: list[ev.Event] = []
        self._columns: dict[str, np.ndarray] = {}
        self._offsets = np.zeros(0, np.int64)  # byte offset of each event's line
        self._lengths = np.zeros(0, np.int64)  # its length without the newline
        self._rows = np.zeros(0, np.int64)  # >= 0: row of the step columns; < 0: -1 - index into _objects
        self._parts: list[tuple] = []
        self._cache: dict[tuple[str, str], Any] = {}
        #: File offset just past the last complete line read (where a follower continues).
        self.offset = 0
        #: Lines skipped as torn, garbage or of an unknown type.
        self.skipped = 0
        #: Step events held as columns (the others are objects).
        self.columnar = 0
        #: Step lines a read without steps (``read_history(steps=False)``) left undecoded.
        self.steps_left_out = 0
        #: Sample lines a read for the newest only (``read_history(newest=...)``) did not make events (left
        #: undecoded, or read as ``sample_columns``).
        self.samples_left_out = 0
        #: Sample type → field → float64 column of its newest lines, for a read that asked for them as columns
        #: (``read_history(columns=...)``).
        self.sample_columns: dict[str, dict[str, np.ndarray]] = {}

    # Sequence protocol ------------------------------------------------------
    def __len__(self) -> int:
        self.seal()
        return len(self._rows)

    def __getitem__(self, index):  # type: ignore[override]
        self.seal()
        if isinstance(index, slice):
            return [self._get(i) for i in range(*index.indices(len(self._rows)))]
        if index < 0:
            index += len(self._rows)
        if not 0 <= index < len(self._rows):
            raise IndexError("history index out of range")
        return self._get(index)

    def __iter__(self) -> Iterator[ev.Event]:
        self.seal()
        handle = open(self.path, "rb") if self.columnar else None
        try:
            for i, row in enumerate(self._rows.tolist()):
                yield self._objects[-1 - row] if row < 0 else self._step(i, row, handle)
        finally:
            if handle is not None:
                handle.close()

    def _get(self, i: int) -> ev.Event:
        row = int(self._rows[i])
        if row < 0:
            return self._objects[-1 - row]
        with open(self.path, "rb") as handle:  # type: ignore[arg-type]
            return self._step(i, row, handle)

    def _step(self, i: int, row: int, handle) -> ev.Event:
        """Step event ``i`` (row ``row``) decoded from its line; from the columns if the file changed since."""
        handle.seek(int(self._offsets[i]))
        event = parse_line(handle.read(int(self._lengths[i])))
        if isinstance(event, ev.StepLogged) and event.step == self._columns["step"][row]:
            return event
        body: dict[str, Any] = {name: self._columns[name][row].item() for name in STEP_FIELDS}
        for name in ("step", "epoch", "batch_size"):
            body[name] = int(body[name])
        body["skipped"] = bool(body["skipped"])
        body["components"] = {k.split(".", 1)[1]: v[row].item() for k, v in self._columns.items()
                              if k.startswith("components.") and v[row] == v[row]}
        return ev.StepLogged(**body)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (History, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, so unhashable like them

    def __repr__(self) -> str:
        return f"<History {len(self)} events, {self.columnar} step events as columns>"

    # Columns ----------------------------------------------------------------
    def others(self, event_type: str) -> list[ev.Event]:
        """Every event not of ``event_type``, in file order; for "step" without decoding any step line.

        A viewer takes the step events of a long run from ``column()`` and folds
        only the rest as objects: at 1M steps that skips ~1M object builds.
        """
        self.seal()
        if event_type == "step":
            return [e for e in self._objects if e.type != "step"]
        return [e for e in self if e.type != event_type]

    def count_type(self, event_type: str) -> int:
        """Number of events of one type (e.g. "step")."""
        self.seal()
        return (self.columnar if event_type == "step" else 0) + sum(1 for o in self._objects if o.type == event_type)

    def step_columns(self) -> list[str]:
        """Names ``column("step", name)`` answers from columns: the numeric fields, then ``components.<name>``."""
        self.seal()
        return list(self._columns) or list(STEP_FIELDS)

    def column(self, event_type: str, name: str) -> np.ndarray:
        """One numeric field of every event of a type, in file order (NaN where absent/None).

        ``name`` is a field (``"loss"``) or a dotted path into a dict field
        (``"components.mse"``).
        """
        key = (event_type, name)
        if key in self._cache:
            return self._cache[key]
        self.seal()
        picked = self._objects_of(event_type)
        values = np.array([_field(o, name) for _, o in picked], np.float64)
        if event_type == "step" and self.columnar:
            col = self._columns.get(name)
            col = np.full(self.columnar, _NAN) if col is None else col
            if picked:
                order = np.concatenate([np.flatnonzero(self._rows >= 0), np.array([i for i, _ in picked])])
                values = np.concatenate([col, values])[np.argsort(order, kind="stable")]
            else:
                values = col
        self._cache[key] = values
        return values

    def _objects_of(self, event_type: str) -> list[tuple[int, ev.Event]]:
        """(event index, object) of every object event of one type (cached: a plot asks column by column)."""
        key = ("objects", event_type)
        if key not in self._cache:
            self._cache[key] = [(i, o) for i, o in zip(np.flatnonzero(self._rows < 0).tolist(), self._objects)
                                if o.type == event_type]
        return self._cache[key]  # type: ignore[return-value]

    # Building ---------------------------------------------------------------
    def add_chunk(self, offsets: np.ndarray, lengths: np.ndarray, rows: np.ndarray, columns: dict | None,
             objects: list[ev.Event]) -> None:
        """Append events of one chunk: rows >= 0 index ``columns`` (chunk-local), < 0 ``objects``."""
        base_row, base_obj = self.columnar, len(self._objects)
        rows = np.where(rows >= 0, rows + base_row, rows - base_obj)
        self._objects.extend(objects)
        n = 0 if not columns else len(columns["step"])
        self.columnar += n
        self._parts.append((offsets, lengths, rows, columns, n))

    def seal(self) -> None:
        """Merge the per-chunk parts (once, when reading is done)."""
        if not self._parts:
            return
        parts, self._parts = self._parts, []
        self._offsets = np.concatenate([self._offsets, *(p[0] for p in parts)])
        self._lengths = np.concatenate([self._lengths, *(p[1] for p in parts)])
        self._rows = np.concatenate([self._rows, *(p[2] for p in parts)])
        self._in_file_order()
        blocks = [(self._columns, len(self._columns.get("step", ())))] + [(p[3] or {}, p[4]) for p in parts]
        names: dict[str, None] = {}
        for cols, _ in blocks:
            names.update(dict.fromkeys(cols))
        self._columns = {name: np.concatenate([cols[name] if name in cols else np.full(n, _NAN)
                                               for cols, n in blocks]) for name in names}
        self._cache = {}

    def _in_file_order(self) -> None:
        """Events added out of file order (the newest samples, decoded after the rest): sorted back by offset,
        the objects too, so ``others()`` and iteration stay in file order."""
        if len(self._offsets) < 2 or bool((np.diff(self._offsets) > 0).all()):
            return
        order = np.argsort(self._offsets, kind="stable")
        self._offsets, self._lengths, self._rows = self._offsets[order], self._lengths[order], self._rows[order]
        is_object = self._rows < 0
        self._objects = [self._objects[i] for i in (-1 - self._rows[is_object]).tolist()]
        self._rows[is_object] = -1 - np.arange(int(is_object.sum()))


def _field(event: Any, name: str) -> float:
    value: Any = event
    for part in name.split("."):
        value = value.get(part) if isinstance(value, dict) else getattr(value, part, None)
        if value is None:
            return _NAN
    try:
        return float(value)
    except (TypeError, ValueError):
        return _NAN


