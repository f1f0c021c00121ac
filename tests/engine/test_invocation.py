"""The program's name in the commands it prints is what runs from where the user stands (engine.core.invocation)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.core.invocation import shell_word
from tests.conftest import ROOT


def _program(python: Path, cwd: Path, path: str) -> str:
    """``program()`` as a process started by ``python`` in ``cwd`` with PATH=``path`` says it."""
    env = {"PATH": path, "PYTHONPATH": str(ROOT), "HOME": os.environ.get("HOME", "/tmp")}
    code = "from engine.core.invocation import program; print(program())"
    return subprocess.run([str(python), "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          check=True, timeout=60).stdout.strip()


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """A directory laid out as the README's install leaves it: .venv/bin/python beside .venv/bin/sensorlm-tui."""
    bin_dir = tmp_path / "project" / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    script = bin_dir / "sensorlm-tui"
    script.write_text("#!/bin/sh\necho ran\n")
    script.chmod(0o755)
    return bin_dir


def test_the_readme_install_prints_the_venv_path_and_an_activated_one_the_bare_name(venv: Path, tmp_path: Path):
    project = venv.parents[1]
    system = "/usr/bin:/bin"
    assert _program(venv / "python", project, system) == ".venv/bin/sensorlm-tui"  # not on PATH: the path
    assert _program(venv / "python", project, f"{venv}:{system}") == "sensorlm-tui"  # activated: the name
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert _program(venv / "python", elsewhere, system) == str(venv / "sensorlm-tui")  # outside: absolute
    other = tmp_path / "other-install"
    other.mkdir()
    (other / "sensorlm-tui").write_text("#!/bin/sh\n")
    (other / "sensorlm-tui").chmod(0o755)
    # the name on PATH is another installation's: this one's path, or the user would run the other program
    assert _program(venv / "python", project, f"{other}:{system}") == ".venv/bin/sensorlm-tui"
    printed = _program(venv / "python", project, system)
    ran = subprocess.run(["bash", "-c", printed], cwd=project, env={"PATH": system}, capture_output=True, text=True)
    assert ran.stdout == "ran\n", ran.stderr


def test_without_a_console_script_the_interpreter_runs_the_module(tmp_path: Path) -> None:
    bare = tmp_path / "bare" / "bin"
    bare.mkdir(parents=True)
    (bare / "python").symlink_to(sys.executable)
    assert _program(bare / "python", tmp_path, "/usr/bin:/bin") == "bare/bin/python -m tui.cli"


@pytest.mark.parametrize("word", ["runs/plain-name", "runs/with space", "runs/it's", "runs/$HOME`id`",
                                  "runs/esc\x1b[31mred", "runs/new\nline", "runs/bidi\u202eevil",
                                  "runs/bad-\udcff-utf8"])
def test_every_word_pastes_back_exactly_and_prints_nothing_a_terminal_acts_on(word: str) -> None:
    quoted = shell_word(word)
    assert quoted.isprintable(), quoted
    echoed = subprocess.run(["bash", "-c", f"printf %s {quoted}"], capture_output=True, check=True).stdout
    assert echoed == os.fsencode(word)
