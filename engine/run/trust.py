"""What a run directory must be before an engine writes in it: whose it is, where it is, what it holds.

A run directory is written by whoever starts the engine, root included, so
nothing in it is trusted that this engine did not make:

- ``check_trusted``: not a system directory (``/``, ``/etc``, ``/usr``, the
  home directory itself…), owned by this uid and writable by nobody else,
  as ssh refuses a group-writable ``~/.ssh``: another user who can write the
  directory can plant a link where the engine writes (a link named
  ``engine.lock`` made root truncate the file it pointed at), or replace
  its control socket and answer in its name;
- ``check_fresh``, the fresh-run guard (the engine and the integrations): a
  new run starts in an empty directory, or beside what an interrupted
  start-up of ours leaves (``LEFTOVERS``), never over a user's own files
  (a user's status.json was overwritten);
- ``check_own_entries``: each of our names (``OWN_ENTRIES``) is what we make
  there, never a link; the files themselves are opened with ``O_NOFOLLOW``
  and replaced by a rename (engine.core.safe_files), so a link planted
  after these checks is refused too, never followed.

Limit: the checks hold for the run directory itself. A parent directory
another user can write lets that user rename the whole run directory
during the run; keep runs under a directory only you can write.

Torch-free.
"""

from __future__ import annotations

import os
import pwd
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from engine.core.fmt import printable


class RunDirError(Exception):
    """A run directory that cannot be used (missing, not writable, not a run); one-line message."""


@dataclass(frozen=True)
class OwnEntry:
    """One name the engine makes in a run directory: its kind, and whether a start-up may leave it alone."""

    #: "file", "dir" or "socket".
    kind: str
    #: True when a start-up stopped before config.toml was written leaves it (a fresh run may start beside it).
    leftover: bool = False


#: Every name the engine, its launcher, the integrations and the viewers create directly in a run directory.
#: The one list: the fresh-run guard (``check_fresh``) accepts nothing else. A component that adds a file or a
#: folder to the run directory adds its name here.
OWN_ENTRIES: dict[str, OwnEntry] = {
    "engine.lock": OwnEntry("file", leftover=True),  # made first, by the engine and by the launcher
    "engine.log": OwnEntry("file", leftover=True),  # the launcher's; counted as ours only beside engine.lock
    "startup.jsonl": OwnEntry("file", leftover=True),
    "checkpoints": OwnEntry("dir", leftover=True),  # a leftover only while empty
    "ranks": OwnEntry("dir", leftover=True),  # torchrun's log directory, made before any rank starts
    "config.toml": OwnEntry("file"),
    "events.jsonl": OwnEntry("file"),
    "events.index": OwnEntry("file"),
    "status.json": OwnEntry("file"),
    "control.sock": OwnEntry("socket"),
    "task": OwnEntry("dir"),
    "exports": OwnEntry("dir"),
    "steps": OwnEntry("dir"),  # the step record (engine.run.steps.layout.DIRNAME)
}
#: What a fresh run accepts in its directory, as the refusal says it.
LEFTOVERS = "engine.lock, engine.log, startup.jsonl, ranks/ and an empty checkpoints/"
#: Temp files of our atomic writes and probes, which a kill can leave: ``.status.json.tmp-<pid>-<hex>``,
#: ``.control.sock.<pid>``, ``.write-test-<pid>``. Ignored by the guard (each writer replaces or removes its own).
_TEMP = re.compile(r"\.[\w.]+\.tmp-[0-9a-f-]+|\.control\.sock\.\d+|\.write-test-\d+")

#: Directories no run may use: the file system's own. Everything under the trees goes with them.
_SYSTEM_TREES = ("/proc", "/sys", "/dev", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
                 "/boot")
_SYSTEM_DIRS = frozenset({"/", "/home", "/root", "/tmp", "/var", "/var/tmp", "/opt", "/srv", "/mnt", "/media",
                          "/run", "/snap", "/nix"})


def _system_dir(root: Path) -> str | None:
    """Why ``root`` is not a run's to use (a system directory, a home directory itself), or None."""
    real = os.path.realpath(root)
    homes = {os.path.realpath(Path.home())}
    try:
        homes.add(os.path.realpath(pwd.getpwuid(os.geteuid()).pw_dir))
    except KeyError:
        pass
    if real in homes:
        return "the home directory itself"
    if real in _SYSTEM_DIRS or any(real == tree or real.startswith(tree + "/") for tree in _SYSTEM_TREES):
        return "a system directory"
    return None


def check_trusted(root: Path) -> None:
    """RunDirError (one line) unless ``root`` may hold a run: not a system or home directory; when it exists, a
    directory owned by this uid that no other user can write. Nothing is created. OSError as ``os.stat`` raises
    it for a path that cannot be looked at (a component too long, a parent that may not be searched)."""
    root = Path(root)
    why = _system_dir(root)
    if why:
        raise RunDirError(f"{printable(root)}: {why}; a run needs a directory of its own (e.g. runs/NAME)")
    try:
        info = os.stat(root)  # a link to a directory: its target is where the files go, so the target is judged
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        raise RunDirError(f"{printable(root)}: exists and is not a directory")
    if info.st_uid != os.geteuid():
        raise RunDirError(f"{printable(root)}: owned by uid {info.st_uid}{_user(info.st_uid)}, not by this user "
                          f"(uid {os.geteuid()}); a run directory must be your own")
    loose = " and ".join(who for who, bit in (("its group", stat.S_IWGRP), ("others", stat.S_IWOTH))
                         if info.st_mode & bit)
    if loose:
        raise RunDirError(f"{printable(root)}: writable by {loose} (mode {stat.S_IMODE(info.st_mode):04o}); a run "
                          f"directory must be writable by its owner alone (chmod go-w {printable(root)})")


def _user(uid: int) -> str:
    try:
        return f" ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return ""


def make_dirs(root: Path) -> None:
    """Create ``root`` (0700) and its missing parents (0755), then ``check_trusted`` it; RunDirError saying why
    not. An existing directory is checked, not changed."""
    root = Path(root)
    check_trusted(root)
    missing = []
    here = root
    while not os.path.lexists(here) and here != here.parent:
        missing.append(here)
        here = here.parent
    try:
        for path in reversed(missing):
            try:
                os.mkdir(path, 0o700 if path == root else 0o755)
            except FileExistsError:
                pass  # made meanwhile (another engine starting): judged below like any existing directory
    except PermissionError:
        raise RunDirError(f"{printable(root)}: run directory is not writable") from None
    except (NotADirectoryError, FileExistsError):
        raise RunDirError(f"{printable(root)}: exists and is not a directory") from None
    except OSError as exc:
        raise RunDirError(f"{printable(root)}: cannot create run directory ({exc.strerror})") from None
    check_trusted(root)


class NotFresh(RunDirError):
    """A fresh run's directory holds something it must not overwrite. ``run_files``: the names of a run found
    there (config.toml, events.jsonl, checkpoints…); ``others``: everything else that is not ours."""

    def __init__(self, message: str, run_files: tuple[str, ...], others: tuple[str, ...]) -> None:
        super().__init__(message)
        self.run_files, self.others = run_files, others


def check_fresh(root: Path) -> None:
    """The fresh-run guard: RunDirError unless a new run may start in the run directory ``root``.

    Accepted: a directory that does not exist yet, an empty one, or one holding only what an interrupted
    start-up of ours leaves (``LEFTOVERS``; engine.log and startup.jsonl only beside an engine.lock, which
    every engine and the launcher make first). Refused, with ``NotFresh`` naming what is there: a run's
    files, a user's own files, a link or a special file under one of our names. ``check_trusted`` first.
    """
    root = Path(root)
    check_trusted(root)
    try:
        with os.scandir(root) as listing:
            entries = sorted(listing, key=lambda e: e.name)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise RunDirError(f"{printable(root)}: cannot list the run directory ({exc.strerror})") from None
    names = {entry.name for entry in entries}
    run_files, others = [], []
    for entry in entries:
        if _TEMP.fullmatch(entry.name):
            continue
        own = OWN_ENTRIES.get(entry.name)
        found = _kind(entry.stat(follow_symlinks=False).st_mode)
        if own is None or found != own.kind:
            others.append(printable(entry.name) + ("" if own is None else f" ({_a(found)})"))
        elif not own.leftover:
            run_files.append(entry.name)
        elif entry.name == "checkpoints" and _has_entries(Path(entry.path)):
            run_files.append("checkpoints")
        elif entry.name in ("engine.log", "startup.jsonl") and "engine.lock" not in names:
            others.append(entry.name)
    if run_files or others:
        listed = [*run_files, *others]
        shown = ", ".join(listed[:6]) + (f" and {len(listed) - 6} more" if len(listed) > 6 else "")
        raise NotFresh(f"{printable(root)}: holds {shown}, which a fresh run would overwrite or mix with; a "
                       f"fresh run needs an empty directory, or one holding only what an interrupted start-up "
                       f"leaves ({LEFTOVERS})", tuple(run_files), tuple(others))


def _has_entries(directory: Path) -> bool:
    with os.scandir(directory) as listing:
        return any(True for _ in listing)


def _a(kind: str) -> str:
    return kind if kind.startswith("a ") else f"a {kind}"


def _kind(mode: int) -> str:
    """What an lstat mode is: file, dir, socket, a symbolic link or a special file."""
    for kind, test in (("file", stat.S_ISREG), ("dir", stat.S_ISDIR), ("socket", stat.S_ISSOCK),
                       ("a symbolic link", stat.S_ISLNK)):
        if test(mode):
            return kind
    return "a special file"


def check_own_entries(root: Path) -> None:
    """RunDirError naming the first of our names in ``root`` that is not what the engine makes there (a link,
    a FIFO where a file goes, a file where the socket goes): for a directory that holds a run."""
    root = Path(root)
    for name, own in OWN_ENTRIES.items():
        try:
            mode = os.lstat(root / name).st_mode
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise RunDirError(f"{printable(root / name)}: cannot inspect ({exc.strerror})") from None
        found = _kind(mode)
        if found != own.kind:
            raise RunDirError(f"{printable(root / name)}: {_a(found)}, where the engine keeps its own {own.kind} "
                              f"(it follows no link and writes only what it made); remove it")
