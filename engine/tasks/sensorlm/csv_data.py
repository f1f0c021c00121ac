"""Minute-level wearable data from CSV files, windowed into days, with strict one-line errors.

Data file (``data.path``)::

    timestamp,heart_rate,steps,skin_temp
    2024-03-01T00:00,58,0,33.9
    2024-03-01T00:01,57,,33.9
    2024-03-01T00:03,,,

* UTF-8 (a leading BOM is allowed), ``\\n`` or ``\\r\\n`` line ends, comma separated, no quoting.
* Header: ``timestamp`` first, then one unique, non-empty name per channel. The number of channel
  columns must equal ``data.channels`` (the model is built from the config).
* ``timestamp``: ISO 8601 at minute resolution (``YYYY-MM-DDTHH:MM``, seconds allowed if ``:00``,
  an offset such as ``Z`` or ``+01:00`` allowed if every row has one), strictly increasing.
  Missing minutes are gaps.
* Values: decimal numbers. A blank cell is a gap (missing data); ``nan``/``inf`` and text are errors.
* Whitespace-only lines are skipped; no line may exceed 64 KiB.

Captions file (``data.captions_path``, optional)::

    window_start,caption
    2024-03-01T00:00,Slept 7.5 hours. A 30-minute run around 07:10.

Everything after the first comma is the caption (surrounding double quotes are removed). Each
``window_start`` must be the start of a window. Windows without a caption get a statistical and
structural one generated from their signals (``captions.describe_signals``).

Windows are ``data.minutes`` long, counted in elapsed minutes from midnight of the first
timestamp's day; a window is kept when at least 10 % of its minutes have any value (a short last
window is padded with gaps). The last ``data.val_fraction`` of the windows (chronologically, at
least one) is the validation split; normalisation statistics (per-channel mean and standard
deviation over valid minutes) come from the training windows only and are saved in the task state.

Every problem raises ``engine.tasks.protocol.TaskError`` with ``file:line:column: what is wrong``.
"""

from __future__ import annotations

import errno
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.core.safe_files import open_regular
from engine.tasks.protocol import TaskError

#: Longest line accepted, in bytes (a 64-channel row is ~1 KiB; anything near this is not our format).
MAX_LINE_BYTES = 64 * 1024
#: A window is kept when at least this fraction of its minutes has any valid value.
MIN_WINDOW_COVERAGE = 0.1
#: Longest time a file may span, first row to last. Storage is sized by rows, not by span, so this is a
#: sanity bound: a mistyped year (0001-01-01, 9999-12-31) is an error naming its line, not a 31 GiB array.
MAX_SPAN_DAYS = 36_525
#: Largest magnitude a value may have: values are stored as float32, and 1e39 would silently become inf.
FLOAT32_MAX = float(np.finfo(np.float32).max)


@dataclass
class Series:
    """A whole CSV file: channel names, the origin (midnight of the first day) and its rows.

    One array row per CSV row (not per minute of the span: the gap-filling happens per window, in
    ``windows``), so memory follows the file's size whatever its timestamps say.
    """

    path: str
    channels: list[str]
    origin: datetime
    minute: np.ndarray  # (rows,) int64 minutes since origin, strictly increasing
    values: np.ndarray  # (rows, channels) float32, NaN at gaps
    valid: np.ndarray  # same shape, bool


@dataclass
class Window:
    """One window of ``minutes`` rows: its start time, values (NaN at gaps), validity and caption (or None)."""

    start: datetime
    values: np.ndarray
    valid: np.ndarray
    caption: str | None = None

    @property
    def start_minute(self) -> int:
        """Minute of day of the first row."""
        return self.start.hour * 60 + self.start.minute


def _lines(path: Path):
    """(line number, decoded text without the line end) for each line; TaskError on size or encoding."""
    try:
        # A FIFO (or /dev/zero) as --data must be an error, not a hang or a read that never ends
        # (engine.core.safe_files); the size is bounded per line below, not per file.
        handle = open_regular(path)
    except FileNotFoundError:
        raise TaskError(f"{path}:1:1: file not found") from None
    except IsADirectoryError:
        raise TaskError(f"{path}:1:1: is a directory, expected a CSV file") from None
    except OSError as exc:
        raise TaskError(f"{path}:1:1: not a regular file ({exc.strerror}); expected a CSV file"
                        if exc.errno == errno.EINVAL else f"{path}:1:1: cannot read ({exc.strerror})") from None
    with handle:
        number = 0
        while True:
            raw = handle.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            number += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                raise TaskError(f"{path}:{number}:{MAX_LINE_BYTES + 1}: line longer than {MAX_LINE_BYTES} bytes")
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                column = len(raw[: exc.start].decode("utf-8", "replace")) + 1
                raise TaskError(f"{path}:{number}:{column}: not valid UTF-8 (byte 0x{raw[exc.start]:02x})") from None
            yield number, text.rstrip("\r\n")


def _fields(text: str) -> list[tuple[int, str]]:
    """(1-based column where the field starts, field text) for each comma-separated field."""
    out, col = [], 1
    for part in text.split(","):
        out.append((col, part))
        col += len(part) + 1
    return out


def parse_timestamp(text: str, where: str) -> datetime:
    """An ISO 8601 minute timestamp; TaskError (prefixed with ``where``) otherwise."""
    s = text.strip()
    try:
        ts = datetime.fromisoformat(s)
    except ValueError:
        raise TaskError(f"{where}: timestamp {s!r} is not ISO 8601 (expected YYYY-MM-DDTHH:MM)") from None
    if ts.second or ts.microsecond:
        raise TaskError(f"{where}: timestamp {s!r} is not on a whole minute")
    return ts


def read_series(path: str | Path, expected_channels: int | None = None) -> Series:
    """Parse and validate a data CSV (see the module docstring); TaskError with file:line:column on any problem."""
    path = Path(path)
    lines = _lines(path)
    header = next(lines, None)
    if header is None or not header[1].strip():
        raise TaskError(f"{path}:1:1: empty file (expected a header line starting with 'timestamp')")
    names = _fields(header[1])
    if names[0][1].strip() != "timestamp":
        raise TaskError(f"{path}:1:1: first column must be 'timestamp', found {names[0][1].strip()!r}")
    channels: list[str] = []
    for col, name in names[1:]:
        name = name.strip()
        if not name:
            raise TaskError(f"{path}:1:{col}: empty channel name")
        if name in channels or name == "timestamp":
            raise TaskError(f"{path}:1:{col}: duplicate column {name!r}")
        channels.append(name)
    if not channels:
        raise TaskError(f"{path}:1:{len(header[1]) + 1}: no channel columns after 'timestamp'")
    if expected_channels is not None and len(channels) != expected_channels:
        raise TaskError(f"{path}:1:1: {len(channels)} channel columns but data.channels={expected_channels}; "
                        f"set data.channels={len(channels)}")
    width = len(channels) + 1
    stamps: list[datetime] = []
    rows: list[list[float]] = []
    previous: datetime | None = None
    for number, text in lines:
        if not text.strip():
            continue
        fields = _fields(text)
        if len(fields) != width:
            col = fields[width][0] if len(fields) > width else len(text) + 1
            raise TaskError(f"{path}:{number}:{col}: expected {width} columns (timestamp + {len(channels)} "
                            f"channels), found {len(fields)}")
        ts = parse_timestamp(fields[0][1], f"{path}:{number}:{fields[0][0]}")
        if previous is not None:
            if (ts.tzinfo is None) != (previous.tzinfo is None):
                raise TaskError(f"{path}:{number}:1: timestamp {fields[0][1].strip()!r} mixes offset-aware "
                                "and naive times")
            if ts <= previous:
                raise TaskError(f"{path}:{number}:1: timestamp {fields[0][1].strip()!r} is not after the previous "
                                f"row's {previous.isoformat()} (timestamps must strictly increase)")
        else:
            first = (number, ts)
        if ts - first[1] > timedelta(days=MAX_SPAN_DAYS):
            raise TaskError(f"{path}:{number}:1: timestamp {fields[0][1].strip()!r} is more than {MAX_SPAN_DAYS} "
                            f"days after the first row's {first[1].isoformat()} (line {first[0]}); a file may span "
                            f"at most {MAX_SPAN_DAYS // 365} years")
        previous = ts
        row: list[float] = []
        for (col, cell), name in zip(fields[1:], channels):
            cell = cell.strip()
            if not cell:
                row.append(math.nan)
                continue
            try:
                value = float(cell)
            except ValueError:
                raise TaskError(f"{path}:{number}:{col}: {name}: {cell[:40]!r} is not a number") from None
            if not math.isfinite(value):
                raise TaskError(f"{path}:{number}:{col}: {name}: {cell!r} is not finite; leave the cell blank "
                                "for missing data")
            if abs(value) > FLOAT32_MAX:
                raise TaskError(f"{path}:{number}:{col}: {name}: {cell[:40]!r} is outside the float32 range "
                                f"(magnitude at most {FLOAT32_MAX:.4g})")
            row.append(value)
        stamps.append(ts)
        rows.append(row)
    if not rows:
        raise TaskError(f"{path}:2:1: no data rows after the header")
    origin = stamps[0].replace(hour=0, minute=0)
    index = np.array([(ts - origin) // timedelta(minutes=1) for ts in stamps], np.int64)
    values = np.asarray(rows, np.float32)
    return Series(str(path), channels, origin, index, values, ~np.isnan(values))


def read_captions(path: str | Path) -> list[tuple[int, datetime, str]]:
    """(line number, window start, caption) for each row of a captions CSV; TaskError on any problem."""
    path = Path(path)
    lines = _lines(path)
    header = next(lines, None)
    if header is None or not header[1].strip():
        raise TaskError(f"{path}:1:1: empty file (expected the header 'window_start,caption')")
    if [f.strip() for f in header[1].split(",")] != ["window_start", "caption"]:
        raise TaskError(f"{path}:1:1: header must be 'window_start,caption', found {header[1][:60]!r}")
    out = []
    seen: set[datetime] = set()
    for number, text in lines:
        if not text.strip():
            continue
        stamp, comma, rest = text.partition(",")
        if not comma:
            raise TaskError(f"{path}:{number}:{len(text) + 1}: expected 'window_start,caption'")
        ts = parse_timestamp(stamp, f"{path}:{number}:1")
        if ts in seen:
            raise TaskError(f"{path}:{number}:1: second caption for window {stamp.strip()}")
        seen.add(ts)
        caption = rest.strip()
        if len(caption) >= 2 and caption[0] == caption[-1] == '"':
            caption = caption[1:-1].replace('""', '"')
        if not caption:
            raise TaskError(f"{path}:{number}:{len(stamp) + 2}: empty caption")
        out.append((number, ts, caption))
    return out


def windows(series: Series, minutes: int) -> list[Window]:
    """Cut a series into consecutive windows of ``minutes`` minutes, keeping those with enough recorded minutes.

    Only windows that hold rows are built (one dense ``minutes`` × channels array each): a window without
    rows could never reach ``MIN_WINDOW_COVERAGE``, and walking the empty span cost 85 s for one row
    dated 0001-01-01.
    """
    number = series.minute // minutes
    starts, first = np.unique(number, return_index=True)
    ends = [*first[1:].tolist(), len(number)]
    out = []
    for window, lo, hi in zip(starts.tolist(), first.tolist(), ends):
        values = np.full((minutes, len(series.channels)), np.nan, np.float32)
        values[series.minute[lo:hi] - window * minutes] = series.values[lo:hi]
        valid = ~np.isnan(values)
        if valid.any(axis=1).mean() >= MIN_WINDOW_COVERAGE:
            out.append(Window(series.origin + timedelta(minutes=window * minutes), values, valid))
    return out


def attach_captions(path: str | Path, wins: list[Window], captions: list[tuple[int, datetime, str]]) -> None:
    """Set ``caption`` on the windows the captions file names; TaskError for a start that is no window's."""
    by_start = {w.start: w for w in wins}
    for number, ts, text in captions:
        if ts not in by_start:
            raise TaskError(f"{path}:{number}:1: window_start {ts.isoformat()} is not the start of a kept window")
        by_start[ts].caption = text


def split(wins: list[Window], val_fraction: float, where: str) -> tuple[list[Window], list[Window]]:
    """(train, validation): the last ``val_fraction`` of the windows, at least one, go to validation."""
    if len(wins) < 2:
        raise TaskError(f"{where}:1:1: {len(wins)} usable window(s); need at least 2 (one train, one validation)")
    n_val = min(max(1, round(val_fraction * len(wins))), len(wins) - 1)
    return wins[:-n_val], wins[-n_val:]


def channel_stats(samples: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (mean, std) over the valid minutes of (values, valid) pairs; std floored at 1e-3."""
    total = count = sq = None
    for values, valid in samples:
        v = np.where(valid, values, 0).astype(np.float64)
        s, n, q = v.sum(0), valid.sum(0), (v * v).sum(0)
        total, count, sq = (s, n, q) if total is None else (total + s, count + n, sq + q)
    count = np.maximum(count, 1)
    mean = total / count
    std = np.sqrt(np.maximum(sq / count - mean**2, 0))
    return mean.astype(np.float32), np.maximum(std, 1e-3).astype(np.float32)


def format_value(x: float) -> str:
    """Shortest text that reads back as the same float32 ('' for NaN, i.e. a gap)."""
    if math.isnan(x):
        return ""
    return np.format_float_positional(np.float32(x), unique=True, trim="-")


def write_csv(path: str | Path, start: datetime, values: np.ndarray, channels: Sequence[str]) -> None:
    """Write minute rows from ``start`` in this module's format (NaN → blank; fully blank rows kept)."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(",".join(["timestamp", *channels]) + "\n")
        for i, row in enumerate(values):
            ts = (start + timedelta(minutes=i)).isoformat(timespec="minutes")
            f.write(ts + "," + ",".join(format_value(float(x)) for x in row) + "\n")


def write_captions(path: str | Path, rows: Sequence[tuple[datetime, str]]) -> None:
    """Write a captions CSV (window start, caption)."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("window_start,caption\n")
        for ts, text in rows:
            f.write(f"{ts.isoformat(timespec='minutes')},{text}\n")


class CsvDataset:
    """Train and validation windows of one CSV file (plus optional captions)."""

    def __init__(self, path: str | Path, captions_path: str | Path | None, minutes: int, val_fraction: float,
                 expected_channels: int | None = None) -> None:
        self.series = read_series(path, expected_channels)
        wins = windows(self.series, minutes)
        if captions_path is not None:
            attach_captions(captions_path, wins, read_captions(captions_path))
        self.train, self.val = split(wins, val_fraction, str(path))

    @property
    def channels(self) -> list[str]:
        """Channel names in column order."""
        return self.series.channels
