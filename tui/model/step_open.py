"""Finding a run's step record for a viewer: open it, wait for it, or build it once from an old run's log.

``plan(run_dir)`` says which:

- ``"record"``: the engine writes (or wrote) ``<run>/steps/``, or an old run's log was converted into it: open
  it (an old engine still writing its log: ``convert`` again takes up what it appended).
- ``"convert"``: a run written before the record existed (event schema ≤ 2: every step is a line of its
  events.jsonl), or one whose conversion stopped part-way: ``convert`` builds the record from the log once
  (engine.run.steps.convert; resumable, the log is only read), reporting its progress; the record can be
  opened after the first chunk, so a viewer shows the start of the run at once and the rest fills in.
  Where the run directory cannot be written (another user's run) the record goes to the viewer's cache
  (``cache_dir``).
- ``"wait"``: a run of this version whose engine has not written its first rows yet (or could not open its
  record): its step lines are read from the log meanwhile, and the record opened once it is there.
- ``"none"``: no run directory (a scripted session).

Two viewers converting the same log take turns (an exclusive lock on the log's descriptor: the engine never
locks its log). A viewer converts in a child process (``convert_apart``: ``python -m tui.model.step_open RUN``
reports its progress on stdout): decoding a 10M-step log takes gigabytes of short-lived objects and most of a
core, which then belong to the child, never to the viewer's memory or its UI thread's GIL; killing it is
safe (the conversion is resumable). Torch- and Textual-free.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

from engine.core.safe_files import open_regular
from engine.run.steps import open_record, record_dir
from engine.run.steps.layout import HEADER, STEP_DTYPE, STEP_FILE, read_count, stored
from tui.model.step_source import RecordSteps

#: The conversion's note inside a record directory (engine.run.steps.convert.MARKER).
MARKER = "converted.json"
#: Errors that mean "this directory is not ours to write": the record goes to the cache instead.
NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


def cache_dir(run_dir: Path) -> Path:
    """Where a viewer keeps the record of a run it may not write into (``$XDG_CACHE_HOME/sensorlm-tui/steps``)."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sensorlm-tui" / "steps"
    return root / hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:16]


def _where(run_dir: Path) -> Path | None:
    """The record directory holding this run's record (its own, else the cache's), None when neither has one."""
    for place in (record_dir(run_dir), cache_dir(run_dir)):
        if (place / STEP_FILE).exists():
            return place
    return None


def plan(run_dir: Path | None) -> str:
    """"record", "convert", "wait" or "none" (module docstring)."""
    if run_dir is None or not Path(run_dir).is_dir():
        return "none"
    run_dir = Path(run_dir)
    place = _where(run_dir)
    if place is not None:
        return "convert" if (place / MARKER).exists() and stale(run_dir) else "record"
    log = run_dir / "events.jsonl"
    if not log.is_file() or log.stat().st_size == 0:
        return "wait"
    from engine.run.steps.convert import log_holds_every_step

    return "convert" if log_holds_every_step(run_dir) else "wait"  # (a new run: the record comes with its steps)


def stale(run_dir: Path) -> bool:
    """True when the run's record was converted from its log and the log holds steps past it (a conversion that
    stopped part-way, or an old engine still writing)."""
    place = _where(Path(run_dir))
    if place is None or not (place / MARKER).exists():
        return False
    from engine.run.steps import needs_conversion

    return needs_conversion(run_dir, into=place)


def open_steps(run_dir: Path) -> RecordSteps | None:
    """The run's record as a chart source, when it has one it can read (None otherwise)."""
    place = _where(Path(run_dir))
    if place is None:
        return None
    try:
        return RecordSteps(open_record(place))
    except OSError:  # gone meanwhile, or not a regular file where the record's files should be (a FIFO)
        return None


def newest_step(run_dir: Path) -> int | None:
    """The step of the record's newest committed row, from the step file's header and that one value (80 bytes
    whatever the run's length: `runs` lists many runs); None without a record or a row."""
    place = _where(Path(run_dir))
    if place is None:
        return None
    with open_regular(place / STEP_FILE) as handle:  # (a FIFO planted there would hold `runs` forever)
        fd = handle.fileno()
        rows = min(read_count(fd), stored(fd, STEP_DTYPE.itemsize))
        data = os.pread(fd, STEP_DTYPE.itemsize, HEADER + (rows - 1) * STEP_DTYPE.itemsize) if rows else b""
    return int.from_bytes(data, "little", signed=True) if len(data) == STEP_DTYPE.itemsize else None


def convert(run_dir: Path, progress: Callable[[int, int], None] | None = None) -> Path:
    """Build (or carry on) the record of an old run from its log; returns where it is. ``progress(done, total)``
    in bytes of the log (raising from it stops the conversion: what is done stays, and the next call goes on).
    Another viewer converting the same log first: wait for it, then carry on from where it stopped."""
    from engine.run.steps.convert import convert as convert_log

    run_dir = Path(run_dir)
    with open(run_dir / "events.jsonl", "rb") as log:
        fcntl.flock(log.fileno(), fcntl.LOCK_EX)
        try:
            place = _where(run_dir)
            if place is not None and place != record_dir(run_dir):
                return convert_log(run_dir, progress, into=place)
            made = not record_dir(run_dir).exists()
            try:
                place = convert_log(run_dir, progress)
            except OSError as exc:
                if exc.errno not in NOT_WRITABLE:
                    raise
                made, place = not cache_dir(run_dir).exists(), convert_log(run_dir, progress,
                                                                          into=cache_dir(run_dir))
            if made and not open_record(place).rows:  # a log without a step: nothing is left behind
                shutil.rmtree(place, ignore_errors=True)
            return place
        finally:
            fcntl.flock(log.fileno(), fcntl.LOCK_UN)


def convert_apart(run_dir: Path, progress: Callable[[int, int], None] | None = None) -> None:
    """``convert`` in a child process (module docstring); ``progress`` as for ``convert`` (raising from it stops
    the child). OSError with the child's last line when it fails."""
    root = Path(__file__).resolve().parents[2]
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    child = subprocess.Popen([sys.executable, "-m", "tui.model.step_open", str(run_dir)], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": path})
    try:
        for line in child.stdout:
            done, total = (int(word) for word in line.split())
            if progress is not None:
                progress(done, total)
        if child.wait():
            lines = child.stderr.read().strip().splitlines()
            raise OSError(lines[-1] if lines else f"the conversion exited with {child.returncode}")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
        child.stderr.close()


def open_or_convert(run_dir: Path, progress: Callable[[int, int], None] | None = None,
                    apart: bool = False) -> RecordSteps | None:
    """The run's record, converted from its log first when it is an old run (``plan``; ``apart``: in a child
    process); None when it has none (yet). What `plot`, `runs` and the compare overlay use: the whole record."""
    kind = plan(run_dir)
    if kind == "convert":
        (convert_apart if apart else convert)(run_dir, progress)
    return open_steps(run_dir) if kind in ("record", "convert") else None


def main(argv: list[str] | None = None) -> int:
    """``python -m tui.model.step_open RUN``: convert an old run's log into its record, printing ``done total``
    (bytes of the log) a line as it goes."""
    args = sys.argv[1:] if argv is None else argv
    convert(Path(args[0]), lambda done, total: print(done, total, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
