"""The run directory: the one contract between an engine and every viewer.

Layout of ``runs/<name>/``::

    engine.lock          flock held by the engine that owns the directory (engine.run.runlock)
    config.toml          resolved configuration (what --resume reads)
    events.jsonl         every event but the steps, append-only, schema version first; a step line a second
                         (engine.run.sinks.STEP_LINE_S) and the first, last and skipped steps
    steps/               every step's metrics in columns (engine.run.steps, docs/STEP_RECORD.md)
    status.json          pid, host, start time, heartbeat (every second), state
    engine.log           the engine process's stdout/stderr
    startup.jsonl        a launched engine's start-up phases until events.jsonl exists (then removed)
    control.sock         owner-only control channel (see engine.run.control.channel)
    checkpoints/         last / last.prev / best / step-N .safetensors
    task/                task artefacts (tokenizer, normalisation stats)

Who may use a directory and what a fresh run accepts in it: engine.run.trust.

Torch-free: viewers import this.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable

from engine.core import migrate
from engine.core.fmt import printable
from engine.core.safe_files import open_for_write, write_atomic
from engine.run.trust import RunDirError, check_fresh, check_own_entries, check_trusted, make_dirs

#: Environment variable a launcher sets to the start-up file an engine tells its phases in until its event log
#: exists (engine.app.startup); ``RunDir.startup`` is where the launcher puts it.
STARTUP_ENV = "SENSORLM_TUI_STARTUP_FILE"
#: A heartbeat older than this (seconds) means the engine is not beating (it beats every second): it crashed when
#: its process is gone, and it is *stalled* while the process exists (stopped by SIGSTOP or Ctrl-Z, in a disk
#: wait, starved). Five missed beats, so a loaded box does not read as a stall; ``liveness`` takes another.
STALE_AFTER_S = 5.0


def default_name() -> str:
    """A sortable name for a new run: its start time and 24 random bits, e.g. 20261202-141503-3fa9c2.

    Random as well as sortable: a name known to the second let another user prepare the directory a run
    was about to use."""
    return f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def new_run_id() -> str:
    """A run's identity, made once when it is created: config.toml, status.json, every checkpoint's config and
    the control channel's hello carry it, so a resume or a viewer can tell this run from another."""
    return secrets.token_hex(8)


@dataclass(frozen=True)
class RunDir:
    """Paths inside one run directory."""

    root: Path

    @property
    def name(self) -> str:
        """The run's name (the directory's)."""
        return self.root.name

    @property
    def lock(self) -> Path:
        """The ownership lock (engine.run.runlock): created first, flocked for the engine's life."""
        return self.root / "engine.lock"

    @property
    def config(self) -> Path:
        """Resolved config.toml."""
        return self.root / "config.toml"

    @property
    def events(self) -> Path:
        """The append-only event log."""
        return self.root / "events.jsonl"

    @property
    def status(self) -> Path:
        """Liveness record, rewritten every second."""
        return self.root / "status.json"

    @property
    def log(self) -> Path:
        """The engine process's output."""
        return self.root / "engine.log"

    @property
    def startup(self) -> Path:
        """Start-up phases, one JSON line each, while a launched engine has no event log yet (then removed)."""
        return self.root / "startup.jsonl"

    @property
    def socket(self) -> Path:
        """The control channel's Unix socket."""
        return self.root / "control.sock"

    @property
    def checkpoints(self) -> Path:
        """Checkpoint files."""
        return self.root / "checkpoints"

    @property
    def task_dir(self) -> Path:
        """Task artefacts (tokenizer, normalisation stats)."""
        return self.root / "task"

    def create(self) -> "RunDir":
        """Make the directory tree (owner-only, ``make_dirs``), or RunDirError saying why not."""
        make_dirs(self.root)
        try:
            try:
                self.checkpoints.mkdir(mode=0o700)
            except FileExistsError:
                check_own_entries(self.root)  # a link or a file named checkpoints is not ours to write into
            probe = self.root / f".write-test-{os.getpid()}"
            probe.unlink(missing_ok=True)
            os.close(open_for_write(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
            probe.unlink()
        except PermissionError:
            raise RunDirError(f"{printable(self.root)}: run directory is not writable") from None
        except OSError as exc:
            raise RunDirError(f"{printable(self.root)}: cannot create run directory ({exc.strerror})") from None
        return self

    def check_fresh(self) -> None:
        """The fresh-run guard (engine.run.trust.check_fresh): RunDirError, a ``NotFresh`` naming what is there,
        unless a new run may start here. Call it before anything is written, and again once the lock is held."""
        check_fresh(self.root)

    def check_trusted(self) -> None:
        """RunDirError unless this user alone may write the directory and it is no system or home directory."""
        check_trusted(self.root)

    def check_own_entries(self) -> None:
        """RunDirError naming the first of our names here that is a link or of the wrong kind (a resume's check)."""
        check_own_entries(self.root)

    def write_config(self, text: str) -> None:
        """config.toml, atomically and durably (temp, fsync, rename): a disk that fills while it is written
        leaves the old file or none, never an empty one that would read as "all defaults". OSError on failure."""
        write_atomic(self.config, text.encode(), durable=True)

    def read_status(self) -> dict | None:
        """The status record with every known field of the right type, or None when absent or garbage.

        status.json is a file anyone with access can edit: a pid of 1e20 made os.kill raise OverflowError
        and took the whole `runs` listing down. A field of the wrong type is dropped, as if absent.
        """
        try:
            record = json.loads(self.status.read_bytes()[:1 << 20])
        except (OSError, ValueError, RecursionError):
            return None
        if not isinstance(record, dict):
            return None
        record = migrate.status(record)  # an older release's record becomes a current one
        return {key: value for key, value in record.items()
                if key not in _STATUS_TYPES or _well_typed(value, *_STATUS_TYPES[key])}


#: status.json field → (allowed types, inclusive numeric range or None). Numbers exclude bool and non-finite.
_STATUS_TYPES: dict[str, tuple[tuple[type, ...], tuple[float, float] | None]] = {
    "pid": ((int,), (1, 2**22)),  # Linux pid_max is at most 2**22
    "host": ((str,), None), "state": ((str,), None), "resume_command": ((str, type(None)), None),
    "started": ((int, float), (0, 1e11)), "heartbeat": ((int, float), (0, 1e11)),
    "step": ((int,), (0, 2**62)), "total_steps": ((int,), (0, 2**62)), "last_eval_step": ((int,), (0, 2**62)),
    "exit_code": ((int, type(None)), (-255, 255)), "best": ((int, float, type(None)), (-1e300, 1e300)),
    "best_metric": ((str, type(None)), None), "run_id": ((str,), None),
    "last_checkpoint": ((str, type(None)), None),
}


def _well_typed(value, types: tuple[type, ...], bounds: tuple[float, float] | None) -> bool:
    if isinstance(value, bool) or not isinstance(value, types):
        return False
    if bounds is not None and isinstance(value, (int, float)):
        return bounds[0] <= value <= bounds[1]  # NaN compares False: dropped
    return True


def atomic_write_text(path: Path, text: str, durable: bool = False) -> None:
    """Write a small file atomically (temp + rename, never through a link) so a reader never sees half of it;
    ``durable`` fsyncs it first (for a record that must survive a power cut, not a heartbeat)."""
    write_atomic(path, text.encode(), durable=durable)


def pid_alive(pid: int) -> bool:
    """True when a process with this pid exists (a zombie, exited and not yet reaped, counts as gone); another
    user's process counts as there."""
    return process_state(pid) is not None


class StatusWriter:
    """Heartbeat thread: rewrites status.json every second and runs periodic callbacks (event flush)."""

    def __init__(self, run_dir: RunDir, interval: float = 1.0, on_beat: Callable[[], None] | None = None) -> None:
        self.run_dir = run_dir
        self.interval = interval
        self.on_beat = on_beat
        self.record = {
            "pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
            "heartbeat": time.time(), "state": "starting", "step": 0, "total_steps": 0,
            "exit_code": None, "resume_command": None,
        }
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def start(self) -> "StatusWriter":
        """Write the first record and start beating."""
        self.beat()
        self._thread.start()
        return self

    def set_step(self, step: int) -> None:
        """The step, from the training thread after every step: one store, no lock. Storing to a key the record
        already has is atomic under the GIL, and the beat's ``json.dumps`` sees the old step or the new one."""
        self.record["step"] = step

    def update(self, **fields) -> None:
        """Change fields of the record (state, step, …); written at the next beat or at once for state."""
        with self._lock:
            self.record.update(fields)
        if "state" in fields:
            self.beat()

    def beat(self) -> None:
        """Write the record now."""
        with self._lock:
            self.record["heartbeat"] = time.time()
            text = json.dumps(self.record)
        try:
            atomic_write_text(self.run_dir.status, text)
        except OSError:
            pass  # a full disk must not kill training; the heartbeat simply goes stale

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.beat()
            if self.on_beat:
                try:
                    self.on_beat()
                except Exception:
                    pass

    def stop(self, **final) -> None:
        """Final record (state, exit code) and stop the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        self.update(**final)
        self.beat()


#: What psutil's process states mean to someone waiting on a stalled engine (any other state is shown as is).
PROCESS_STATES = {"stopped": "stopped (SIGSTOP or Ctrl-Z)", "tracing-stop": "stopped by a debugger",
                  "disk-sleep": "waiting on the disk (uninterruptible)", "running": "running but not beating",
                  "sleeping": "sleeping but not beating"}


@dataclass(frozen=True)
class Liveness:
    """What a viewer can tell of a run's engine: ``state`` (live / stalled / finished / aborted / failed / crashed /
    stale: another host's, silent / unknown) and, for a stalled one, its last heartbeat, its pid and its
    process's state as psutil reads it (stopped, disk-sleep, running…). Equal while nothing a viewer shows
    changed: a live engine's carries no heartbeat."""

    state: str
    heartbeat: float | None = None
    pid: int | None = None
    process: str | None = None

    def silent_s(self, now: float | None = None) -> float | None:
        """Seconds since a stalled engine's last heartbeat (None for any other state)."""
        if self.heartbeat is None:
            return None
        return max(0.0, (time.time() if now is None else now) - self.heartbeat)

    def describe(self, now: float | None = None) -> str:
        """One line: 'stalled: no heartbeat for 25 s; its process (pid 4242) is stopped (SIGSTOP or Ctrl-Z):
        kill -CONT 4242 resumes it'; the state alone otherwise."""
        silent = self.silent_s(now)
        if self.state != "stalled" or silent is None:
            return self.state
        what = PROCESS_STATES.get(self.process or "", self.process or "in an unknown state")
        hint = f": kill -CONT {self.pid} resumes it" if self.process in ("stopped", "tracing-stop") else ""
        return f"stalled: no heartbeat for {silent:.0f} s; its process (pid {self.pid}) is {what}{hint}"


def process_state(pid: int, alive_at: float | None = None) -> str | None:
    """psutil's state of process ``pid`` (running, sleeping, stopped, disk-sleep…); None when no process there can
    be the one that was alive at ``alive_at`` (epoch seconds): none at all, a zombie (exited, not yet reaped), or
    one started after that time, which reuses the pid of a process long gone."""
    if not 0 < pid < 2**31:
        return None
    import psutil  # here: `runs` and the viewers import this module, and most of them never ask

    try:
        process = psutil.Process(pid)
        state, created = process.status(), process.create_time()
    except psutil.NoSuchProcess:
        return None
    except psutil.AccessDenied:  # another user's process: it exists, its state is not ours to read
        return "unknown"
    if state in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
        return None
    if alive_at is not None and created > alive_at + 1.0:  # one second: the boot time psutil adds is rounded
        return None
    return state


def probe(run_dir: RunDir, now: float | None = None) -> Liveness:
    """The run's liveness from status.json, its heartbeat and (on this host) its process; see ``Liveness``.

    A live process with a stale heartbeat is stalled, not crashed: a SIGSTOPped engine read as crashed ("its
    engine died (no heartbeat, process gone)") while its pid was there in state T, and came back to life."""
    status = run_dir.read_status()
    if status is None:
        return Liveness("unknown")
    state = status.get("state", "")
    if state in ("finished", "aborted", "failed"):
        return Liveness(state)
    now = time.time() if now is None else now
    heartbeat = status.get("heartbeat")
    fresh = heartbeat is not None and now - heartbeat < STALE_AFTER_S
    pid = status.get("pid", 0)
    if status.get("host") != socket.gethostname():  # another machine's process cannot be looked at from here
        return Liveness("live") if fresh else Liveness("stale", heartbeat, pid)
    process = process_state(pid, heartbeat or status.get("started"))
    if process is None:
        return Liveness("crashed")
    return Liveness("live") if fresh else Liveness("stalled", heartbeat, pid, process)


def liveness(run_dir: RunDir, now: float | None = None) -> str:
    """The state word of ``probe``: live / stalled / finished / aborted / failed / crashed / stale / unknown."""
    return probe(run_dir, now).state


def resume_command(run_dir: RunDir) -> str:
    """The command that continues this run, as it runs when pasted here (engine.core.invocation)."""
    from engine.core.invocation import command

    return command("train", "--resume", run_dir.root)
