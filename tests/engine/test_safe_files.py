"""engine.core.safe_files: type, size and depth bounds on a file someone else named, each met at once."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

from engine.core import safe_files


def test_a_fifo_a_device_and_a_directory_are_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    for path, kind in ((fifo, "a FIFO"), (Path("/dev/zero"), "a device")):
        with pytest.raises(OSError) as info:
            safe_files.read_regular(path, 1 << 20)
        assert info.value.errno == errno.EINVAL and info.value.strerror == f"{kind}, not a regular file"
    with pytest.raises(IsADirectoryError):
        safe_files.read_regular(tmp_path, 1 << 20)
    assert time.monotonic() - started < 2, "a FIFO's open must not wait for a writer"


def test_size_is_judged_before_a_byte_is_read(tmp_path: Path) -> None:
    sparse = tmp_path / "sparse"
    with open(sparse, "wb") as handle:
        handle.truncate(3 << 30)
    with pytest.raises(OSError) as info:
        safe_files.read_regular(sparse, 1 << 20)
    assert info.value.errno == errno.EFBIG and info.value.strerror == \
        "3221225472 bytes, larger than the 1 MiB allowed"
    small = tmp_path / "small"
    small.write_bytes(b"x" * 10)
    assert safe_files.read_regular(small, 10) == b"x" * 10


@pytest.mark.parametrize("text, depth", [
    ('{"a": [1, {"b": []}]}', 4), ('"[[[[["', 0), ('["]]]]", ["\\"[["]]', 2), ("[]" * 1000, 1), ("3", 0),
])
def test_json_depth_ignores_brackets_inside_strings(text: str, depth: int) -> None:
    assert safe_files.json_depth(text.encode()) == depth


def test_deep_json_is_refused_before_the_decoder_recurses(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(safe_files.DeepJSON, match="nested 100000 levels deep; at most 64 allowed"):
        safe_files.read_json(deep, 1 << 20)
    fine = tmp_path / "fine.json"
    fine.write_text('{"cadence_minutes": 30, "bands": ["094"]}')
    assert safe_files.read_json(fine, 1 << 20) == {"cadence_minutes": 30, "bands": ["094"]}


def test_a_file_to_write_is_never_a_link_a_fifo_a_hard_link_or_another_users(tmp_path: Path) -> None:
    """What every writer in a run directory opens with (open_for_write): each refused at the open, nothing written."""
    target = tmp_path / "precious"
    target.write_text("kept\n")
    (tmp_path / "link").symlink_to(target)
    os.link(target, tmp_path / "hard")
    os.mkfifo(tmp_path / "fifo")
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    for name, err, said in (("link", errno.ELOOP, "a symbolic link, not followed"),
                            ("hard", errno.EPERM, "has 2 hard links"),
                            ("fifo", errno.EINVAL, "a FIFO, not a regular file")):
        with pytest.raises(OSError) as info:
            safe_files.open_for_write(tmp_path / name, flags)
        assert info.value.errno == err and info.value.strerror.startswith(said), (name, info.value)
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.write_text("theirs\n")
        os.chown(theirs, 65534, 65534)
        with pytest.raises(safe_files.NotOurs, match="owned by uid 65534, not by this user"):
            safe_files.open_for_write(theirs, flags)
    assert target.read_text() == "kept\n"


def test_an_atomic_write_replaces_a_planted_link_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("kept\n")
    (tmp_path / "config.toml").symlink_to(target)
    safe_files.write_atomic(tmp_path / "config.toml", b"name = 'x'\n")
    assert not (tmp_path / "config.toml").is_symlink() and (tmp_path / "config.toml").read_text() == "name = 'x'\n"
    assert target.read_text() == "kept\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml", "precious"]
