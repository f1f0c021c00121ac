"""The dashboard imports no torch: the first frame must not wait ~1 s for it."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT, cli_env


def test_dashboard_modules_do_not_import_torch():
    probe = ("import tui.dashboard.app, tui.commands.run_dashboard, tui.dashboard.scripted, themes, sys; "
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'textual'}))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=cli_env(), capture_output=True, text=True,
                         check=True, timeout=60).stdout.strip()
    assert out == "['textual']"
