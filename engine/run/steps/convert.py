"""``convert``: the step record of a run written before it existed, built once from its events.jsonl.

An older run (event schema ≤ 2, engine.core.migrate.STEP_RECORD_SCHEMA) has every step as a line of its log
and no ``steps/``. ``convert(run_dir, progress)`` reads the log a chunk of whole lines at a time (read by
position: neither held whole nor mapped, so a viewer converting a 2.6 GB log stays small), decodes a chunk's
step lines in one msgspec call, and appends them as columns
(StepWriter.append_columns): a 10M-step log is a few seconds of decoding, not a viewer's gigabytes.

- **The old log is only read.** Everything is written under ``steps/`` (or ``into``).
- **Safe to kill, and resumable.** After each chunk is committed, ``steps/converted.json`` says how far into
  the log the record goes (written to a temporary name and renamed). A second ``convert`` continues from
  there; the rows of a chunk a kill cut short are redone (a step at or below the last one redoes from there),
  so none is lost or doubled. A log that grew since (an old engine still writing) is taken up where the
  record stopped.
- **A partial view at once.** The record is readable after the first chunk: a viewer runs ``convert`` on a
  worker, opens the record as soon as ``progress`` first calls back, and ``refresh()``es it on each call; the
  curves fill in from the left while the bar runs.
- **Resumed runs.** A step at or below the previous one in the log starts a redo, as in a live run: the
  record keeps the last attempt of each step.

A run whose record the engine wrote itself (schema 3 and later: no ``converted.json``) needs nothing; its log
holds step lines only at a cadence.

**An old run resumed by this version** (``adopt``): before the engine appends its first row, the log's steps
are converted into ``steps/`` (taken up where a viewer's conversion stopped, redone where a kill left it
torn) and ``converted.json`` is removed, so the record is the engine's own from then on: every reader opens
one record, the old steps then the new. Left as a converted record, a viewer would convert the resumed log's
cadence lines into it again, redoing the engine's rows from the first of them.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import operator
import os
import re
from pathlib import Path
from typing import Any, Callable

import msgspec
import numpy as np

from engine.core import migrate
from engine.core.safe_files import open_regular
from engine.run import events as ev
from engine.run.history.store import STEP_PREFIX, parse_line
from engine.run.steps.fields import FIELD_DTYPES
from engine.run.steps.layout import STEP_FILE, read_count, record_dir
from engine.run.steps.writer import StepWriter

#: Where a conversion notes how far into the log it got (inside the record directory).
MARKER = "converted.json"
#: Bytes of the log decoded at a time (whole lines).
CHUNK_BYTES = 16 << 20
_NAN = float("nan")
#: A step line however it is spelled (the fast path takes the ones ``events.to_json`` writes).
_STEP_TYPE = re.compile(rb'"type"\s*:\s*"step"')


def _step_row() -> type:
    """A msgspec struct of StepLogged's fields, typed so a whole chunk of step lines decodes in C."""
    types = {"float": float, "int": int, "bool": bool, "dict": dict[str, Any]}
    spec = []
    for field in dataclasses.fields(ev.StepLogged):
        default = msgspec.field(default_factory=field.default_factory) \
            if field.default_factory is not dataclasses.MISSING else field.default
        spec.append((field.name, types.get(field.type, Any), default))
    return msgspec.defstruct("ConvertedStep", spec, gc=False)


_ROWS = msgspec.json.Decoder(list[_step_row()], strict=False)  # strict=False: the writer's "nan" strings


def needs_conversion(run_dir: str | os.PathLike, into: str | os.PathLike | None = None) -> bool:
    """Whether ``run_dir`` has a log whose steps are not (all) in a record yet."""
    target = record_dir(run_dir) if into is None else Path(into)
    log = Path(run_dir) / "events.jsonl"
    if not log.exists():
        return False
    if (target / STEP_FILE).exists() and not (target / MARKER).exists():
        return False  # the engine's own record
    return _resume_offset(target, log) < log.stat().st_size


def log_holds_every_step(run_dir: str | os.PathLike) -> bool:
    """Whether the run's log has a line for every step (event schema < migrate.STEP_RECORD_SCHEMA): a record
    converted from a later log (whose own record is gone) holds only its step lines, at their cadence."""
    try:
        with open_regular(Path(run_dir) / "events.jsonl") as handle:
            first = json.loads(handle.readline())
    except (OSError, ValueError):
        return True
    version = first.get("version", 1) if isinstance(first, dict) and first.get("type") == "schema" else 1
    return migrate.steps_in_log(int(version))


def adopt(run_dir: str | os.PathLike) -> int:
    """Make ``steps/`` hold every step of an old run's log before an engine appends to it (module docstring);
    the number of rows the conversion added (0 when there was nothing to convert).

    Holds the viewers' lock on the log (tui.model.step_open.convert) while it converts, so a viewer
    converting the same log at the same moment finishes first and this carries on from where it stopped.
    """
    run_dir = Path(run_dir)
    target, log = record_dir(run_dir), run_dir / "events.jsonl"
    if not log.exists() or log.stat().st_size == 0:
        return 0  # a new run: its record comes with its steps
    if not (target / MARKER).exists() and ((target / STEP_FILE).exists() or not log_holds_every_step(run_dir)):
        return 0  # the engine's own record, or a log of this version (its step lines are only a cadence)
    with open_regular(log) as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            before = _rows(target)
            convert(run_dir)
            (target / MARKER).unlink()  # last: a kill before this leaves a conversion the next start carries on
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    return _rows(target) - before


def _rows(target: Path) -> int:
    """The committed rows of the record in ``target`` (0 without one)."""
    try:
        with open_regular(target / STEP_FILE) as handle:
            return read_count(handle.fileno())
    except FileNotFoundError:
        return 0


def convert(run_dir: str | os.PathLike, progress: Callable[[int, int], None] | None = None, *,
            into: str | os.PathLike | None = None, chunk_bytes: int = CHUNK_BYTES) -> Path:
    """Build (or carry on) the step record of ``run_dir`` from its events.jsonl; returns the record directory.

    ``progress(done, total)`` is called with bytes of the log after each chunk (and once at the start).
    ``into``: where to put the record when the run directory is not writable (a viewer's cache).
    """
    run_dir = Path(run_dir)
    target = record_dir(run_dir) if into is None else Path(into)
    log = run_dir / "events.jsonl"
    if (target / STEP_FILE).exists() and not (target / MARKER).exists():
        return target  # written by the engine as the run trained: nothing to convert
    offset = _resume_offset(target, log)
    head = _probe(log)
    target.mkdir(parents=True, exist_ok=True)
    _mark(target, head, offset)  # first: a record this leaves half-made is never taken for the engine's own
    writer = StepWriter(target)
    try:
        with open_regular(log) as handle:
            size = os.fstat(handle.fileno()).st_size
            if progress is not None:
                progress(offset, size)
            _convert_from(handle.fileno(), offset, size, writer, (target, head), progress, chunk_bytes)
    finally:
        writer.close()
    return target


def _convert_from(fd: int, offset: int, size: int, writer: StepWriter, marker: tuple[Path, str],
                  progress: Callable[[int, int], None] | None, chunk_bytes: int) -> None:
    want = chunk_bytes
    while offset < size:
        data = os.pread(fd, min(want, size - offset), offset)
        cut = data.rfind(b"\n")
        if cut < 0:  # a line longer than a chunk (read more), or the torn tail (done)
            if offset + len(data) >= size:
                break
            want *= 2
            continue
        want = chunk_bytes
        steps, columns = _chunk_columns(data[:cut + 1])
        _append(writer, steps, columns)
        offset += cut + 1
        _mark(*marker, offset)
        if progress is not None:
            progress(offset, size)


def _chunk_columns(data: bytes) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The step rows of the complete lines in ``data``, as columns."""
    lines = data.split(b"\n")
    fast = [line for line in lines if line.startswith(STEP_PREFIX)]
    try:
        rows = _ROWS.decode(b"[" + b",".join(fast) + b"]")
    except msgspec.DecodeError:  # a torn or odd line among them: every line through the event parser
        rows = None
    if rows is None or any(not line.startswith(STEP_PREFIX) and _STEP_TYPE.search(line) for line in lines):
        # (rare: a torn line, or step lines another writer spelled differently) in the log's order
        rows = [e for e in map(parse_line, (line for line in lines if line)) if isinstance(e, ev.StepLogged)]
    n = len(rows)
    steps = np.fromiter(map(operator.attrgetter("step"), rows), np.int64, n)
    columns = {name: _field(rows, name) for name in FIELD_DTYPES}
    parts = [row.components for row in rows]
    for name in dict.fromkeys(key for part in parts for key in part):
        try:
            values = np.fromiter((part.get(name, _NAN) for part in parts), np.float64, n)
        except (TypeError, ValueError):  # a "nan" string, a None
            values = np.fromiter((_number(part.get(name)) for part in parts), np.float64, n)
        columns["components." + name] = values
    return steps, columns


def _field(rows: list, name: str) -> np.ndarray:
    """One field of every row as float64: in C when every value is a number (the typed decode's rows)."""
    try:
        return np.fromiter(map(operator.attrgetter(name), rows), np.float64, len(rows))
    except (TypeError, ValueError):  # (rows from the event parser: "nan" strings, None)
        return np.fromiter((_number(getattr(row, name)) for row in rows), np.float64, len(rows))


def _number(value) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value in ev.SPECIAL_FLOATS:
        return ev.SPECIAL_FLOATS[value]
    return _NAN


def _append(writer: StepWriter, steps: np.ndarray, columns: dict[str, np.ndarray]) -> None:
    """Append rows, a run of strictly increasing steps at a time (a step that goes back redoes from there)."""
    if not len(steps):
        return
    breaks = np.flatnonzero(np.diff(steps) <= 0) + 1
    for lo, hi in zip([0, *breaks.tolist()], [*breaks.tolist(), len(steps)]):
        writer.append_columns(steps[lo:hi], {name: values[lo:hi] for name, values in columns.items()})


def _probe(log: Path) -> str:
    """The log's first bytes: a marker for another log (a new run in the same place) is not taken up."""
    with open(log, "rb") as handle:
        return handle.read(256).hex()


def _resume_offset(target: Path, log: Path) -> int:
    try:
        marker = json.loads((target / MARKER).read_text())
        if marker.get("head") == _probe(log) and (target / STEP_FILE).exists():
            return int(marker["offset"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return 0


def _mark(target: Path, head: str, offset: int) -> None:
    """Note (atomically) that the record holds the steps of the log starting ``head`` up to byte ``offset``."""
    path = target / MARKER
    temp = path.with_name(f".{MARKER}.{os.getpid()}.tmp")
    temp.write_text(json.dumps({"source": "events.jsonl", "offset": offset, "head": head}))
    os.replace(temp, path)
