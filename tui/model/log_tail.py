"""The last event of each wanted type in an events.jsonl, read from the file's end only.

`sensorlm-tui runs` must answer at once on a run with a million logged steps
(~300 MB of JSON): decoding the whole log would take over 20 s on the CI box
(engine/run/history/store.py). Every line ``events.to_json`` writes starts with
``{"type":"<name>"``, so the type is read from a line's first bytes without
decoding it; only the few lines kept are decoded. Cost: at most ``max_bytes``
read (1 MiB, ~3,500 step lines) and one ``from_json`` per wanted type.
Torch-free, textual-free.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.run import events as ev

#: Bytes read from the end of the log; older events are not looked for (status.json covers the rest).
TAIL_BYTES = 1 << 20
#: Bytes read from the start, for the first RunStarted when the tail has none.
HEAD_BYTES = 64 << 10

_PREFIX = b'{"type":"'


def _line_type(line: bytes) -> str | None:
    if not line.startswith(_PREFIX):
        return None
    end = line.find(b'"', len(_PREFIX))
    return line[len(_PREFIX):end].decode("ascii", "replace") if end > 0 else None


def _read_range(path: Path, start: int, size: int) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(start)
        return handle.read(size)


def last_events(path: Path, types: set[str], max_bytes: int = TAIL_BYTES) -> dict[str, ev.Event]:
    """``{type: newest event of that type}`` among the log's last ``max_bytes``; {} when there is no log.

    Only the current run's: the search stops at the newest ``run_started`` that began a fresh run (not a
    resume). A script rerun into the same directory appends a new run to the old one's log, and the older
    run's later step, best or ending must not be read as this one's (a rerun killed at step 43 was listed
    at step 91 with the old run's ``finished``). A resume continues its run: what precedes it still counts."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return {}
    start = max(0, size - max_bytes)
    try:
        data = _read_range(path, start, size - start)
    except OSError:
        return {}
    lines = data.split(b"\n")
    if start > 0:
        lines = lines[1:]  # the first line is cut by the seek
    found: dict[str, ev.Event] = {}
    for line in reversed(lines):
        kind = _line_type(line)
        if kind != "run_started" and (kind not in types or kind in found):
            continue
        event = ev.from_json(line.decode("utf-8", "replace"))
        if event is None:  # a torn last line (engine killed mid-write) is skipped
            continue
        if kind in types:
            found.setdefault(kind, event)
        if kind == "run_started" and not (event.resumed_from or event.start_step):
            break  # a fresh run began here: what is older belongs to another run
        if len(found) == len(types):
            break
    return found


def first_event(path: Path, kind: str, max_bytes: int = HEAD_BYTES) -> ev.Event | None:
    """The first event of type ``kind`` in the log's first ``max_bytes`` (e.g. the original RunStarted)."""
    try:
        data = _read_range(path, 0, max_bytes)
    except OSError:
        return None
    for line in data.split(b"\n"):
        if _line_type(line) == kind:
            event = ev.from_json(line.decode("utf-8", "replace"))
            if event is not None:
                return event
    return None
