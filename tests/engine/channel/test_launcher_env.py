"""The launched engine imports the engine package that launched it, whatever the caller's directory."""

from __future__ import annotations

import os
from pathlib import Path

import engine
from engine.run.control import launcher


def test_the_launch_environment_puts_this_checkout_first_on_the_path(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = launcher.engine_environment(tmp_path / "startup.jsonl")
    first, *rest = env["PYTHONPATH"].split(os.pathsep)
    assert Path(first, "engine", "__init__.py").resolve() == Path(engine.__file__).resolve()
    assert rest == ["/elsewhere"]
