"""Import boundaries: config/events/control are torch- and textual-free; the CLI's --help is too."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT, cli_env


def _loaded(code: str) -> set[str]:
    probe = code + "\nimport sys; print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in "
    probe += "('torch', 'textual', 'rich', 'tui'))))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=cli_env(), capture_output=True, text=True,
                         check=True).stdout.strip()
    return {m.split(".")[0] for m in out.split(",") if m}


def test_engine_contract_modules_load_neither_torch_nor_textual() -> None:
    assert _loaded("import engine.core.config, engine.run.events, engine.run.control.requests, "
                   "engine.run.control.session, engine.run.rundir, "
                   "engine.run.sinks, engine.core.cli_args, engine.app.main") == set()


def test_cli_module_loads_no_torch_or_textual() -> None:
    assert _loaded("import tui.cli") == {"tui"}


def test_engine_never_imports_textual() -> None:
    mods = _loaded("import engine.training.loop, engine.checkpoint.format, engine.tasks.toy")
    assert "textual" not in mods and "rich" not in mods and "tui" not in mods
    assert "torch" in mods
