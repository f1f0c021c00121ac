"""The viewer side of the channel (client, history, launcher, server) loads neither torch nor textual."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT, cli_env


def test_channel_modules_are_torch_and_textual_free() -> None:
    probe = ("import engine.run.control.channel, engine.run.control.client, engine.run.history.store, "
             "engine.run.control.launcher, sys; "
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'textual', 'rich', 'tui'}))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=cli_env(), capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
