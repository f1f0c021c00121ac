"""The command line as a new user types it: bare dashboard flags, no silent abbreviations."""

from __future__ import annotations

import pytest

from tui.cli import main


def test_bare_dashboard_flags_go_to_train(capsys) -> None:
    # `sensorlm-tui --theme light` is the dashboard on the demo run in the light theme, not "invalid choice".
    with pytest.raises(SystemExit) as info:
        main(["--theme", "light", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: sensorlm-tui train") and "--theme" in out


def test_an_abbreviated_flag_is_refused_in_one_line(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["train", "--max-step", "10", "--headless"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unrecognized arguments: --max-step 10" in err, err
