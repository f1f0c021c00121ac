"""The hostile-input corpus (tests/hostile/, 58 files): every one a clean one-line error, exit 2, nothing changed.

One parametrised test runs each case in a real engine process (forked from
the preloaded server; the same ``engine.app.main.main`` as ``python -m engine``)
and checks: exit code 2, exactly one stderr line ``sensorlm-tui: error:
<place>: <what>`` containing the case's expected text, no traceback, no
stdout, and a byte-identical tree before and after (the case's work area, its
run directory, the corpus file). A few config cases also go through the real
``sensorlm-tui train`` entry point, and one proves the
checkpoint corpus is not stale (its valid control file resumes).
"""

from __future__ import annotations

import hashlib
import shutil
import tomllib
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli

CORPUS = ROOT / "tests" / "hostile"
CASES = tomllib.loads((CORPUS / "cases.toml").read_text())
IDS = [f"{kind}/{name}" for kind, cases in CASES.items() for name in cases]
CSV_FLAGS = ["--task", "sensorlm", "--set", "sensorlm.data.channels=2", "--set", "sensorlm.model.patch_channels=2"]


def _tree_digest(*roots: Path) -> dict[str, str]:
    """path → sha256 of every file (and '<dir>' for every directory) under ``roots``."""
    out = {}
    for root in roots:
        for path in sorted([root, *root.rglob("*")]):
            out[str(path)] = "<dir>" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _case(kind: str, name: str) -> tuple[str, list[str]]:
    spec = CASES[kind][name]
    if isinstance(spec, str):
        return spec, []
    return spec["expect"], list(spec.get("flags", []))


def _argv(kind: str, name: str, area: Path) -> list[str]:
    """The engine arguments for a case; checkpoint cases get their run directory built in ``area``."""
    expect, flags = _case(kind, name)
    source = CORPUS / kind / name
    if kind == "config":
        return ["--config", str(source), "--threads", "1", "--run-dir", str(area / "run"), *flags]
    if kind == "csv":
        return [*CSV_FLAGS, "--data", str(source), "--threads", "1", "--run-dir", str(area / "run"), *flags]
    run = area / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(CORPUS / "checkpoint" / "config.toml", run / "config.toml")
    shutil.copy(source, run / "checkpoints" / "last.safetensors")
    return ["--resume", str(run), *flags]


def _check(code: int, stdout: str, stderr: str, expect: str) -> None:
    assert code == 2, f"exit {code}:\n{stdout[-1500:]}\n{stderr[-1500:]}"
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("sensorlm-tui: error: ") and expect in lines[0], lines[0]
    assert len(lines[0]) < 700, f"a {len(lines[0])}-character error line"
    assert stdout == ""


@pytest.mark.parametrize("case", IDS)
def test_hostile_input_is_a_one_line_error_and_changes_nothing(engines, tmp_path: Path, case: str) -> None:
    kind, name = case.split("/", 1)
    area = tmp_path / "area"
    area.mkdir()
    argv = _argv(kind, name, area)
    before = _tree_digest(area, CORPUS / kind)
    engine = engines.spawn(argv, tmp_path / "io")
    code = engine.wait(120)
    _check(code, "\n".join(engine.lines()), engine.stderr(), _case(kind, name)[0])
    assert _tree_digest(area, CORPUS / kind) == before, "bad input changed files on disk"


# Config errors come before torch is imported, so these cost ~0.5 s each; a checkpoint case goes through the real
# CLI in test_no_unpickling.py, and CSV and checkpoint cases otherwise share every line after prepare() with these.
@pytest.mark.parametrize("case", ["config/unknown_key.toml", "config/deep_nesting.toml", "config/non_utf8.toml"])
def test_hostile_input_through_the_real_cli(tmp_path: Path, case: str) -> None:
    kind, name = case.split("/", 1)
    argv = _argv(kind, name, tmp_path)
    before = _tree_digest(tmp_path, CORPUS / kind)
    result = run_cli("train", *argv, cwd=tmp_path)
    _check(result.returncode, result.stdout, result.stderr, _case(kind, name)[0])
    assert _tree_digest(tmp_path, CORPUS / kind) == before


def test_corpus_control_checkpoint_still_resumes(engines, tmp_path: Path) -> None:
    """If this fails the checkpoint format moved on: run tests/hostile/make_checkpoints.py."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(CORPUS / "checkpoint" / "config.toml", run / "config.toml")
    shutil.copy(CORPUS / "checkpoint" / "valid.safetensors", run / "checkpoints" / "last.safetensors")
    engine = engines.spawn(["--resume", str(run), "--max-steps", "5"], tmp_path)
    assert engine.wait(60) == 0, engine.stderr() + "\n(stale corpus? run tests/hostile/make_checkpoints.py)"
    assert engine.wait_for(r"^start .* at step (\d+)").group(1) == "3"
