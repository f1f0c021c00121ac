"""Run-directory ownership: one engine per run directory, for the engine's whole life.

Why a lock and not a check. The old guard looked for ``events.jsonl``, which
an engine creates only after its setup (seconds to minutes): two launches a
moment apart both passed it, both wrote ``config.toml`` and ``status.json``,
and the loser died with a traceback. Now the first file an engine creates in
the directory is ``engine.lock``, and it holds an exclusive ``flock`` on it
until it exits; a second engine's ``flock`` fails at once, before it writes
anything, and it is refused in one line naming the holder (pid and host,
which the holder writes into the file once it owns it).

Why flock. The kernel drops it when the holder's descriptor closes, so a
SIGKILLed engine never leaves a stale lock to clean up by hand (a pid file
would); it is per open file description, so two engines in one process
(threads, the in-process dashboard) exclude each other too. Cost: one open
descriptor per engine. Limit: flock on NFS is only as good as the server's
lock manager; run directories on network file systems are not supported for
concurrent launches.

The lock file is opened without following a link (``O_NOFOLLOW``) and must be
a regular file this uid owns with one link (engine.core.safe_files), in a
directory ``engine.run.trust.check_trusted`` accepts: a link planted as
``engine.lock`` made root truncate the file it pointed at and write the
lock's record into it.

Torch-free.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time

from engine.core.fmt import printable
from engine.core.invocation import command
from engine.core.safe_files import NotOurs, open_for_write
from engine.run.rundir import RunDir, RunDirError
from engine.run.trust import make_dirs

#: How long a refused engine waits for the holder to write its pid into the lock file (it does so at once).
_HOLDER_WAIT_S = 0.5


class RunLock:
    """An exclusive flock on ``<run>/engine.lock``; ``release`` (or process exit) gives it up."""

    def __init__(self, run_dir: RunDir, fd: int) -> None:
        self.run_dir = run_dir
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, run_dir: RunDir) -> "RunLock":
        """Create the directory if needed (engine.run.trust.make_dirs: one this user alone may write) and take its
        lock; RunDirError (one line) naming the holder if taken, or what is wrong with the directory or the file."""
        path = run_dir.lock
        make_dirs(run_dir.root)
        fd = open_lock_file(run_dir)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise RunDirError(f"{printable(run_dir.root)}: in use by another engine ({holder}); watch it with "
                              f"`{command('attach', run_dir.root)}`") from None
        except OSError as exc:
            os.close(fd)
            raise RunDirError(f"{printable(path)}: cannot lock the run directory ({exc.strerror})") from None
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()})
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, record.encode() + b"\n", 0)
        except OSError:
            pass  # a full disk: the lock still holds, a refused engine just cannot name us
        return cls(run_dir, fd)

    @property
    def held(self) -> bool:
        """True until released."""
        return self._fd is not None

    def release(self) -> None:
        """Give the directory up (the file stays: deleting it would race with a newcomer locking it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def open_lock_file(run_dir: RunDir) -> int:
    """A descriptor on ``engine.lock``, created if absent (0600), never through a link; RunDirError saying why not.
    The launcher makes it too, before the engine's log, so a start-up's leftovers are recognisably ours."""
    try:
        return open_for_write(run_dir.lock, os.O_RDWR | os.O_CREAT, 0o600)
    except NotOurs as exc:
        raise RunDirError(f"{printable(run_dir.lock)}: {exc.strerror}; refusing to lock or write it") from None
    except PermissionError:
        raise RunDirError(f"{printable(run_dir.root)}: run directory is not writable") from None
    except (FileExistsError, NotADirectoryError):
        raise RunDirError(f"{printable(run_dir.root)}: exists and is not a directory") from None
    except OSError as exc:
        raise RunDirError(f"{printable(run_dir.lock)}: cannot open the lock file ({exc.strerror})") from None


def _holder(fd: int) -> str:
    """'pid N on host H' from the lock file (the holder writes it right after locking)."""
    deadline = time.monotonic() + _HOLDER_WAIT_S
    while True:
        try:
            record = json.loads(os.pread(fd, 4096, 0) or b"null")
            pid, host = int(record["pid"]), str(record["host"])[:100]
            return f"pid {pid} on host {host}"
        except (OSError, ValueError, TypeError, KeyError, OverflowError):
            if time.monotonic() > deadline:
                return "holder unknown"
            time.sleep(0.02)
