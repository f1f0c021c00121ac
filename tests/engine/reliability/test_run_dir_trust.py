"""The run directory trusts nothing it did not make (engine.run.trust): where it is, what it holds, what is a link.

Each refusal is one line, exit 2, and leaves every file where it was; most come from the checks made before
torch is imported, so these cost about half a second each in a process forked from the preloaded server.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path

import pytest

from engine.app.main import build_parser
from engine.app.prepare import UsageError, prepare
from engine.run.rundir import RunDir, RunDirError, default_name
from engine.run.runlock import RunLock
from engine.run.sinks import JsonlSink
from engine.run.trust import OWN_ENTRIES
from tests.engine.reliability.harness import TOY, events_of

FAST = [*TOY, "--max-steps", "2", "--eval-every", "0"]


def _digest(*roots: Path) -> dict[str, str]:
    """Every entry under ``roots``: a file's sha256, a link's target, '<dir>'."""
    out = {}
    for root in roots:
        for path in sorted([root, *root.rglob("*")]):
            if path.is_symlink():
                out[str(path)] = "-> " + os.readlink(path)
            elif path.is_dir():
                out[str(path)] = "<dir>"
            elif path.is_file():
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                out[str(path)] = "<special>"
    return out


def _refused(engine, expect: str) -> str:
    code = engine.wait(60)
    lines = engine.stderr().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in engine.stderr(), (code, engine.stderr())
    assert lines[0].startswith("sensorlm-tui: error: ") and expect in lines[0], lines[0]
    return lines[0]


def _prepared(*argv: str):
    return prepare(build_parser().parse_args(list(argv)))


@pytest.fixture(scope="module")
def finished(engines, tmp_path_factory) -> Path:
    """A finished toy run (checkpoints at steps 1 and 2), copied by the tests that resume it."""
    where = tmp_path_factory.mktemp("finished")
    engine = engines.spawn([*TOY, "--max-steps", "2", "--eval-every", "1", "--run-dir", str(where / "run")], where)
    assert engine.wait(120) == 0, engine.stderr()
    return where / "run"


# -- 12: where a run may not go ---------------------------------------------------------------
@pytest.mark.parametrize("where", ["/", "/etc", "/usr/lib", "/proc/self", "/dev/shm", "/tmp", "HOME"])
def test_system_directories_and_the_home_directory_are_refused_as_run_directories(where: str) -> None:
    """Checked in this process through prepare(): on a build without the check `--run-dir /` trained into /."""
    path = str(Path.home()) if where == "HOME" else where
    with pytest.raises(UsageError) as info:
        _prepared(*FAST, "--run-dir", path)
    expect = "the home directory itself" if where == "HOME" else "a system directory"
    assert str(info.value).startswith(f"--run-dir {path}: {expect}") and "\n" not in str(info.value)


def test_a_run_directory_another_user_may_write_is_refused(engines, tmp_path: Path) -> None:
    for mode, who in ((0o770, "its group"), (0o707, "others"), (0o777, "its group and others")):
        run = tmp_path / f"run-{mode:o}"
        run.mkdir()
        run.chmod(mode)
        engine = engines.spawn([*FAST, "--run-dir", str(run)], tmp_path / "io")
        _refused(engine, f"{run}: writable by {who} (mode 0{mode:o}); a run directory must be writable by its owner "
                         "alone")
        assert list(run.iterdir()) == []
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    (resumed / "config.toml").write_text("")
    resumed.chmod(0o775)
    _refused(engines.spawn(["--resume", str(resumed)], tmp_path / "io"), f"--resume {resumed}: writable by its group")


# -- 13: what a fresh run may start beside ------------------------------------------------------
def test_a_users_own_status_json_log_and_notes_are_never_overwritten_by_a_fresh_run(engines, tmp_path: Path) -> None:
    run = tmp_path / "mine"
    run.mkdir()
    for name, text in (("status.json", '{"mine": true}'), ("engine.log", "my log\n"), ("notes.txt", "notes\n")):
        (run / name).write_text(text)
    before = _digest(run)
    line = _refused(engines.spawn([*FAST, "--run-dir", str(run)], tmp_path / "io"),
                    f"{run}: holds status.json, engine.log, notes.txt, which a fresh run would overwrite or mix with")
    assert "an empty directory, or one holding only what an interrupted start-up leaves (engine.lock" in line
    assert "--resume" not in line, "no config.toml: a resume could not continue it, so it is not advised"
    assert _digest(run) == before


def test_a_fresh_run_starts_beside_what_an_interrupted_start_up_left(engines, tmp_path: Path) -> None:
    run = tmp_path / "left"
    (run / "checkpoints").mkdir(parents=True)
    (run / "engine.lock").write_text('{"pid": 1, "host": "h", "started": 0}\n')
    (run / "engine.log").write_text("sensorlm-tui: error: an earlier launch's\n")
    (run / ".status.json.tmp-99-abcd").write_text("{")  # a killed writer's temp file
    engine = engines.spawn([*FAST, "--run-dir", str(run)], tmp_path / "io")
    assert engine.wait(120) == 0, engine.stderr()
    assert events_of(run, "run_finished")[-1]["status"] == "finished"


# -- 10: never through a link -------------------------------------------------------------------
def test_the_lock_file_is_never_opened_through_a_link(tmp_path: Path) -> None:
    """The lock's own open (O_NOFOLLOW), past every check made before it: a link planted as engine.lock made root
    truncate the file it pointed at."""
    target = tmp_path / "precious"
    target.write_text("root's file\n")
    run = RunDir(tmp_path / "run")
    run.root.mkdir(mode=0o700)
    run.lock.symlink_to(target)
    with pytest.raises(RunDirError, match=r"engine\.lock: cannot open the lock file \(a symbolic link, not followed"):
        RunLock.acquire(run)
    assert target.read_text() == "root's file\n"


def test_the_event_log_is_never_appended_through_a_link(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("root's file\n")
    (tmp_path / "events.jsonl").symlink_to(target)
    with pytest.raises(OSError, match="a symbolic link, not followed"):
        JsonlSink(tmp_path / "events.jsonl")
    assert target.read_text() == "root's file\n"


@pytest.mark.parametrize("name", sorted(OWN_ENTRIES))
def test_a_resume_refuses_a_link_under_any_name_the_engine_writes(engines, finished: Path, tmp_path: Path,
                                                                  name: str) -> None:
    run = tmp_path / "run"
    subprocess.run(["cp", "-a", str(finished), str(run)], check=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / ("a-dir" if OWN_ENTRIES[name].kind == "dir" else "a-file")
    if OWN_ENTRIES[name].kind == "dir":
        target.mkdir()
        if (run / name).is_dir():
            subprocess.run(["cp", "-a", f"{run / name}/.", str(target)], check=True)
            subprocess.run(["rm", "-rf", str(run / name)], check=True)
    else:
        target.write_text("not the engine's\n")
    (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(target)
    before = _digest(outside, run)
    _refused(engines.spawn(["--resume", str(run), "--max-steps", "4"], tmp_path / "io"),
             f"{run / name}: a symbolic link, where the engine keeps its own {OWN_ENTRIES[name].kind}")
    assert _digest(outside, run) == before


# -- 14: config.toml, whole or not at all ---------------------------------------------------------
def test_an_empty_config_toml_is_an_error_naming_it_and_never_read_as_all_defaults(engines, tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "engine.lock").write_text("")
    (run / "config.toml").write_text("")  # what a disk full at start left before config.toml was written atomically
    before = _digest(run)
    _refused(engines.spawn(["--resume", str(run)], tmp_path / "io"),
             f"{run / 'config.toml'}: empty; a run's config.toml holds at least its task")
    line = _refused(engines.spawn([*FAST, "--run-dir", str(run)], tmp_path / "io"), f"{run}: holds config.toml")
    assert "--resume cannot continue it either" in line and "use --resume" not in line, line
    assert _digest(run) == before


def _mount_tmpfs(target: Path, size: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(target)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount here ({result.stderr.strip()}); needs CAP_SYS_ADMIN")


def test_a_disk_full_at_start_leaves_no_config_and_the_same_command_starts_again(engines, tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    _mount_tmpfs(disk, "8m")  # room for the retry's checkpoints once the filler is gone
    try:
        filler = disk / "filler"
        with open(filler, "wb", buffering=0) as handle:  # the disk full before the engine starts: empty files fit
            try:
                while True:
                    handle.write(b"\0" * 4096)
            except OSError:
                pass
        run = disk / "run"
        argv = [*FAST, "--task", "toy", "--run-dir", str(run)]
        _refused(engines.spawn(argv, tmp_path / "io"), f"{run / 'config.toml'}: cannot write (No space left on device)")
        assert not (run / "config.toml").exists(), "a disk full at start left a config.toml"
        assert not [p for p in run.iterdir() if p.name.startswith(".config.toml")], "its temp file was left"
        filler.unlink()
        again = engines.spawn(argv, tmp_path / "io")
        assert again.wait(120) == 0, again.stderr()
        assert 'name = "toy"' in (run / "config.toml").read_text()
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


# -- 15, 16: run names ----------------------------------------------------------------------------
def test_a_run_name_that_is_not_utf8_is_refused_before_anything_is_created(engines, tmp_path: Path) -> None:
    bad = os.fsdecode(b"run-\xff")  # what Python makes of an argv byte that is not UTF-8
    area = tmp_path / "area"
    area.mkdir()
    _refused(engines.spawn([*FAST, "--run-dir", str(area / bad)], tmp_path / "io"),
             "--run-dir's name='run-\\xff': not valid UTF-8")
    _refused(engines.spawn([*FAST, "--name", bad, "--run-dir", str(area / "ok")], tmp_path / "io"),
             "name='run-\\xff': not valid UTF-8")
    _refused(engines.spawn([*FAST, "--name", "ok", "--run-dir", str(area / bad)], tmp_path / "io"),
             "the path is not valid UTF-8")
    assert list(area.iterdir()) == [], "a half-made directory"


def test_a_run_name_with_control_characters_is_refused_and_shown_escaped(engines, tmp_path: Path) -> None:
    area = tmp_path / "area"
    area.mkdir()
    for name, shown in (("a\nb", "a\\nb"), ("\x1b[31mred", "\\x1b[31mred"), ("evil\u202etxt", "evil\\u202etxt")):
        line = _refused(engines.spawn([*FAST, "--name", name, "--run-dir", str(area / "r")], tmp_path / "io"),
                        f"name='{shown}': a run name cannot contain control characters")
        assert "\x1b" not in line
    assert list(area.iterdir()) == []


def test_names_and_paths_reach_the_terminal_escaped(engines, tmp_path: Path) -> None:
    """A directory whose name holds an ESC sequence and a newline (its run named plainly with --name): the start
    and end lines show them escaped, one line each."""
    run = tmp_path / "\x1b[31mred\nrun"
    engine = engines.spawn([*FAST, "--name", "plain", "--run-dir", str(run)], tmp_path / "io")
    assert engine.wait(120) == 0, engine.stderr()
    out = engine.out.read_text()
    assert "\x1b" not in out
    start = next(line for line in out.splitlines() if line.startswith("start "))
    assert "run \\x1b[31mred\\nrun task toy" in start, start
    done = next(line for line in out.splitlines() if line.startswith("done "))
    assert "\\x1b[31mred\\nrun/checkpoints/last.safetensors" in done, done


def test_default_run_names_are_not_predictable_to_the_second() -> None:
    names = {default_name() for _ in range(50)}  # all within a second or two
    assert len(names) == 50
    assert all(re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", name) for name in names), names


def test_prepare_refuses_nothing_it_should_not(tmp_path: Path) -> None:
    """The checks do not refuse an ordinary run directory: new under a new parent, or existing and empty (0755)."""
    for root in (tmp_path / "a" / "b" / "run", tmp_path):
        prepared = _prepared(*FAST, "--run-dir", str(root))
        assert prepared.run_dir.root == root and len(prepared.config.run_id) == 16
    assert not (tmp_path / "a").exists(), "prepare() creates nothing"
