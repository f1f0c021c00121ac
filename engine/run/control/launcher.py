"""Start an engine process detached from the terminal, and know within seconds whether it came up.

``launch`` runs ``python -m engine <argv> --run-dir <dir>`` in its own session
(a hang-up of the terminal or Ctrl-C in the dashboard does not reach it), with
stdin from /dev/null, stdout and stderr appended to the run's engine.log, and
no other inherited descriptors. It returns once the engine's status.json
(written by this very process: same pid) has left "starting", or its control
socket has appeared. If the process exits first, ``LaunchError`` carries the
engine's own error as it wrote it to engine.log (its ``sensorlm-tui: error:``
line and the lines that follow it: a memory refusal lists its options there)
and its exit code — found by ``Popen.poll`` every ``POLL_S``, so a bad flag is
reported in the time the engine takes to reject it, not after ``timeout``.

``spawn`` and ``wait_up`` are its two halves: the dashboard spawns the engine
before it imports Textual (the engine's first seconds overlap the UI's), and
waits on its worker thread once the first frame is up. While it waits, a
``LaunchWatch`` hears what a viewer needs before the engine is up: its pid,
and each start-up phase as it begins (the engine writes them to
``RunDir.startup``, named in its environment, until its event log exists:
engine.app.startup). When the watch says ``cancelled`` (a Ctrl-C
in the dashboard while connecting) the engine gets SIGINT, which during
start-up ends it with exit 130 and nothing trained, and ``LaunchCancelled``
says so: a starting engine is never left running unseen.

The run directory, its ``engine.lock`` and engine.log exist before the engine
validates its config (the log must have somewhere to go); a failed launch
leaves only those two, which a fresh run accepts as a start-up's leftovers
(engine.run.trust: engine.log counts as ours only beside engine.lock), and
the log holds the error. The directory is judged first (this user's alone,
no system directory) and neither file is opened through a link. Torch-free.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from engine.core.fmt import printable
from engine.core.safe_files import open_for_write
from engine.run import events as ev
from engine.run.control.client import RunClient
from engine.run.history import parse_line
from engine.run.rundir import STARTUP_ENV, RunDir, RunDirError
from engine.run.runlock import open_lock_file
from engine.run.trust import make_dirs

#: How often launch() checks on the starting engine (s).
POLL_S = 0.02
#: How long a cancelled launch waits for the engine to end on SIGINT before it kills it (s).
STOP_WAIT_S = 15.0
#: States that mean the engine is past start-up.
_UP = ("running", "paused", "checkpointing", "aborting", "finished", "aborted", "failed")


class LaunchError(Exception):
    """The engine did not come up; ``str()`` is one line, ``exit_code`` the process's (None if still running).

    ``details`` are the lines the engine's error went on with (a memory refusal's options, one a line);
    ``whole()`` is everything a person needs to act on it: the line, every option, and the log's path.
    """

    def __init__(self, message: str, exit_code: int | None = None, log: Path | None = None,
                 details: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.log = log
        self.details = tuple(details)

    def whole(self) -> str:
        """The error line, its detail lines, and where the engine's log is."""
        return "\n".join([str(self), *self.details, *([f"engine log: {printable(self.log)}"] if self.log else [])])


class LaunchCancelled(LaunchError):
    """The watch cancelled the launch and the starting engine was stopped; ``str()`` says where it was."""


class LaunchWatch:
    """What a launch tells its caller while the engine starts; every hook optional (this base does nothing)."""

    def spawned(self, pid: int, run_dir: Path) -> None:
        """The engine process exists, with this pid, on this run directory."""

    def phase(self, event: ev.PhaseStarted) -> None:
        """The engine began a start-up phase."""

    def cancelled(self) -> bool:
        """True to stop the starting engine and give up (checked every ``POLL_S``)."""
        return False

    def abandoned(self) -> bool:
        """True to stop waiting and leave the engine starting (the caller says where it is)."""
        return False


class _StartupTail:
    """The phases appended to an engine's start-up file since the last read (complete lines only)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        #: The newest phase read ("" before the first).
        self.current = ""

    def read(self) -> list[ev.PhaseStarted]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read(1 << 20)
        except OSError:  # not written yet, or removed once the event log holds the phases
            return []
        complete = data[:data.rfind(b"\n") + 1]
        self.offset += len(complete)
        phases = [e for e in map(parse_line, complete.splitlines()) if isinstance(e, ev.PhaseStarted)]
        if phases:
            self.current = phases[-1].phase
        return phases


class LaunchedEngine:
    """A detached engine process started by ``launch``."""

    def __init__(self, process: subprocess.Popen, run_dir: Path) -> None:
        self.process = process
        #: The engine's process id.
        self.pid = process.pid
        #: Its run directory.
        self.run_dir = run_dir

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the engine to exit and return its exit code (subprocess.TimeoutExpired after ``timeout``)."""
        return self.process.wait(timeout)

    def poll(self) -> int | None:
        """The exit code if the engine has exited, else None."""
        return self.process.poll()

    def client(self, read_only: bool = False) -> RunClient:
        """A viewer of this engine's run."""
        return RunClient(self.run_dir, read_only=read_only)


def engine_command(argv: list[str], run_dir: Path) -> list[str]:
    """The engine's command line: this interpreter, ``-m engine``, the flags, the run directory."""
    return [sys.executable, "-m", "engine", *argv, "--run-dir", str(run_dir)]


def engine_environment(startup: Path) -> dict:
    """The environment a launched engine runs with: the caller's, plus where it tells its start-up phases
    (``startup``), this checkout first on PYTHONPATH (the engine that launches is the engine launched, whatever
    the caller's directory) and unbuffered output (engine.log current when read after a crash)."""
    env = dict(os.environ)
    env[STARTUP_ENV] = str(startup)  # where the engine tells its phases until its event log exists
    # The engine package next to this file, whatever the caller's working directory.
    here = str(Path(__file__).resolve().parents[3])  # engine/run/control/launcher.py → the checkout
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"  # engine.log up to date when someone reads it after a crash
    return env


#: Most detail lines a launch error carries (a refusal lists a handful of options).
MAX_DETAIL_LINES = 40
#: How the engine starts its one error (engine.app.main); lines after it belong to the same message.
ERROR_PREFIX = "sensorlm-tui: error: "


def _refusal(log: Path, start: int) -> list[str]:
    """The engine's error as it wrote it to the log after ``start``: its ``sensorlm-tui: error:`` line (prefix
    removed) and every line after it (a memory refusal's options); else the last non-empty line."""
    try:
        with open(log, "rb") as handle:
            handle.seek(start)
            text = handle.read()[-65536:].decode("utf-8", "replace")
    except OSError:
        return []
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    first = max((i for i, line in enumerate(lines) if line.startswith(ERROR_PREFIX)), default=None)
    if first is None:
        return [lines[-1].strip()] if lines else []
    return [lines[first][len(ERROR_PREFIX):], *lines[first + 1:first + 1 + MAX_DETAIL_LINES]]


class Starting:
    """An engine process spawned and not up yet (``spawn``); ``wait_up`` watches it come up, ``stop`` ends it."""

    def __init__(self, process: subprocess.Popen, rd: RunDir, started: float, log_start: int) -> None:
        self.process, self.rd, self.started, self.log_start = process, rd, started, log_start
        self.tail = _StartupTail(rd.startup)

    @property
    def pid(self) -> int:
        """The engine's process id."""
        return self.process.pid

    def stop(self) -> "LaunchCancelled":
        """SIGINT (then SIGKILL) to the starting engine; the LaunchCancelled that says where it was."""
        self.tail.read()
        return _stop(self.process, self.rd, self.tail.current)


def spawn(argv: list[str], run_dir: Path | str) -> Starting:
    """Start an engine on ``run_dir`` and return at once (LaunchError when it cannot be started)."""
    run_dir = Path(run_dir).absolute()
    rd = RunDir(run_dir)
    try:
        make_dirs(rd.root)  # this user's alone, no system directory (engine.run.trust)
        os.close(open_lock_file(rd))  # first, as an engine does: what follows is recognisably a start-up's
        rd.startup.unlink(missing_ok=True)  # an earlier launch's: its phases are not this engine's
        log = os.fdopen(open_for_write(rd.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab")
    except RunDirError as exc:
        raise LaunchError(str(exc)) from None
    except OSError as exc:
        raise LaunchError(f"{printable(exc.filename or run_dir)}: cannot create the run directory "
                          f"({exc.strerror})") from None
    log_start = log.tell()
    started = time.time()
    try:
        process = subprocess.Popen(
            engine_command(argv, run_dir), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            close_fds=True, start_new_session=True, env=engine_environment(rd.startup))
    except OSError as exc:
        raise LaunchError(f"cannot start the engine ({exc.strerror})", log=rd.log) from None
    finally:
        log.close()  # the child has its own copy
    return Starting(process, rd, started, log_start)


def wait_up(starting: Starting, timeout: float = 60.0, watch: LaunchWatch | None = None) -> LaunchedEngine:
    """Return once the spawned engine is up; LaunchError (one line) when it is not, LaunchCancelled when
    ``watch`` cancelled it (the engine stopped). The watch hears the pid and every phase so far first."""
    watch = watch or LaunchWatch()
    watch.spawned(starting.pid, starting.rd.root)
    try:
        return _wait_up(starting.process, starting.rd, watch, starting.tail, starting.started, starting.log_start,
                        timeout)
    except LaunchError:
        if starting.process.poll() is not None:  # the engine is gone: its phases are in engine.log, the error too
            starting.rd.startup.unlink(missing_ok=True)
        raise


def launch(argv: list[str], run_dir: Path | str, timeout: float = 60.0,
           watch: LaunchWatch | None = None) -> LaunchedEngine:
    """Start an engine on ``run_dir`` and return when it is up (``spawn``, then ``wait_up``)."""
    return wait_up(spawn(argv, run_dir), timeout, watch)


def _wait_up(process: subprocess.Popen, rd: RunDir, watch: LaunchWatch, tail: _StartupTail, started: float,
             log_start: int, timeout: float) -> LaunchedEngine:
    """Poll the starting engine until it is up, has failed, or the watch cancels it."""
    deadline = time.monotonic() + timeout
    while True:
        for phase in tail.read():
            watch.phase(phase)
        code = process.poll()
        status = rd.read_status() or {}
        ours = status.get("pid") == process.pid
        if ours and status.get("state") in _UP:
            return LaunchedEngine(process, rd.root)
        if ours and _fresh_socket(rd, started):
            return LaunchedEngine(process, rd.root)
        if code is not None:
            if code == 0:  # a run short enough to finish before we looked: it came up
                return LaunchedEngine(process, rd.root)
            said = _refusal(rd.log, log_start) or ["no output"]
            raise LaunchError(f"engine exited with code {code}: {said[0]}", exit_code=code, log=rd.log,
                              details=tuple(said[1:]))
        if watch.cancelled():
            raise _stop(process, rd, tail.current)
        if watch.abandoned():
            raise LaunchError(f"stopped waiting for the engine (pid {process.pid}); it keeps starting in "
                              f"{printable(rd.root)}")
        if time.monotonic() > deadline:
            process.terminate()
            raise LaunchError(f"engine did not come up within {timeout:g} s (stopped it); see {printable(rd.log)}",
                              log=rd.log)
        time.sleep(POLL_S)


def _stop(process: subprocess.Popen, rd: RunDir, phase: str) -> LaunchCancelled:
    """SIGINT to a starting engine (it ends with 130, nothing trained), SIGKILL if it has not within
    ``STOP_WAIT_S``; the LaunchCancelled that says where it was."""
    process.send_signal(signal.SIGINT)
    try:
        code = process.wait(STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        code = process.wait()
    where = f" while {phase}" if phase else " as it started"
    return LaunchCancelled(f"stopped the engine{where} (exit {code}): nothing was trained; {printable(rd.root)}",
                           exit_code=code, log=rd.log)


def _fresh_socket(rd: RunDir, started: float) -> bool:
    try:
        return os.stat(rd.socket).st_mtime >= started - 1
    except OSError:
        return False
