"""Two users on one machine: root trains, another uid (65534, run through `setpriv --reuid`) prepares the directory.

The attack seen: the other uid made the run directory root was about to use, with `engine.lock` a link to a
root-owned file, and root's `train --run-dir` truncated that file and wrote its lock record into it. Here the
other uid plants a link for every name the engine writes (and for its temp files), each pointing at a root-owned
file or directory outside the run; root's fresh run, resume and dashboard launch are each refused in one line,
and every target is byte-for-byte and time-for-time what it was. Then the same links in a directory of root's
own: the fresh-run guard refuses them as not the engine's.

Runs as root with setpriv (CI: root on a fresh machine); skipped, saying why, anywhere else.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from engine.run.control.launcher import LaunchError, spawn
from engine.run.trust import OWN_ENTRIES
from tests.conftest import cli_env
from tests.engine.reliability.harness import TOY

OTHER = 65534
AS_OTHER = ["setpriv", "--reuid", str(OTHER), "--regid", str(OTHER), "--clear-groups"]
#: Temp names a writer might use beside our files (ours are random now; these are the old predictable ones).
TEMPS = (".config.toml.tmp-1", ".status.json.tmp-1-1", ".control.sock.1", ".write-test-1")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: root trains while another uid prepares the directory"),
    pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux) to act as another uid"),
]


@pytest.fixture
def base():
    """/tmp/two-uids-*/ (root's, 0755) with drop/ (1777: anyone may make a directory there, as in /tmp) and
    targets/ (root's files and a directory that no run may touch)."""
    root = Path(tempfile.mkdtemp(prefix="two-uids-", dir="/tmp"))
    root.chmod(0o755)
    (root / "drop").mkdir(mode=0o777)
    (root / "drop").chmod(0o1777)
    targets = root / "targets"
    targets.mkdir(mode=0o755)
    for name in [*OWN_ENTRIES, *TEMPS]:
        if OWN_ENTRIES.get(name) is not None and OWN_ENTRIES[name].kind == "dir":
            (targets / name).mkdir()
            (targets / name / "kept").write_text(f"root's {name}/kept\n")
        else:
            (targets / name).write_text(f"root's {name}\n")
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _snapshot(directory: Path) -> dict[str, tuple]:
    """Everything under ``directory``: content, mode, owner and modification time of each entry."""
    out = {}
    for path in sorted([directory, *directory.rglob("*")]):
        info = path.lstat()
        content = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        out[str(path)] = (content, info.st_mode, info.st_uid, info.st_mtime_ns, info.st_size)
    return out


#: Every name the engine writes; and those a guard that looks for an existing run does not look at (what the
#: attacker planted: engine.lock among them, no config.toml, events.jsonl or checkpoints to be noticed by).
EVERY_NAME = (*OWN_ENTRIES, *TEMPS)
UNNOTICED = tuple(name for name in EVERY_NAME if name not in ("config.toml", "events.jsonl", "checkpoints"))


def _plant(run: Path, targets: Path, as_other: bool, names: tuple[str, ...] = EVERY_NAME) -> None:
    """``run`` made (by the other uid when ``as_other``) with a link under each of ``names`` into ``targets``."""
    script = ("import os, sys\nrun, targets, names = sys.argv[1], sys.argv[2], sys.argv[3:]\n"
              "os.mkdir(run, 0o755)\n"
              "for name in names:\n    os.symlink(os.path.join(targets, name), os.path.join(run, name))\n")
    prefix = AS_OTHER if as_other else []
    subprocess.run([*prefix, sys.executable, "-c", script, str(run), str(targets), *names], check=True)


def _engine(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *argv], cwd=cwd, env=cli_env(), capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)


def _one_line(result: subprocess.CompletedProcess, expect: str) -> None:
    lines = result.stderr.splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("sensorlm-tui: error: ") and expect in lines[0], lines[0]


@pytest.mark.parametrize("names", [EVERY_NAME, UNNOTICED], ids=["every_name", "names_a_run_guard_overlooks"])
def test_a_directory_prepared_by_another_uid_is_refused_and_nothing_is_written_through_its_links(
        base: Path, names: tuple[str, ...]) -> None:
    run, targets = base / "drop" / "run", base / "targets"
    _plant(run, targets, as_other=True, names=names)
    assert run.stat().st_uid == OTHER and (run / "engine.lock").lstat().st_uid == OTHER
    before = _snapshot(base)
    fresh = _engine(*TOY, "--max-steps", "2", "--run-dir", str(run), cwd=base)
    _one_line(fresh, f"{run}: owned by uid {OTHER}")
    _one_line(_engine("--resume", str(run), cwd=base), f"--resume {run}: owned by uid {OTHER}")
    with pytest.raises(LaunchError, match=f"{run}: owned by uid {OTHER}"):  # the dashboard's launch of an engine
        spawn([*TOY, "--max-steps", "2"], run)
    assert _snapshot(base) == before, "a file was written (or a link replaced) in a directory another uid prepared"


def test_links_under_every_name_the_engine_writes_are_never_followed_in_roots_own_directory(base: Path) -> None:
    """The directory passes the ownership check (root made it); the links are not the engine's: a fresh run is
    refused without opening any of them."""
    runs = base / "mine"
    runs.mkdir(mode=0o700)
    run, targets = runs / "run", base / "targets"
    _plant(run, targets, as_other=False)
    run.chmod(0o700)
    before = _snapshot(base)
    result = _engine(*TOY, "--max-steps", "2", "--run-dir", str(run), cwd=base)
    _one_line(result, f"{run}: holds ")
    assert "engine.lock (a symbolic link)" in result.stderr and "which a fresh run would overwrite" in result.stderr
    assert _snapshot(base) == before
