"""run_dashboard: bad options are one line and exit 2, before any terminal is taken over."""

from __future__ import annotations

from tui.commands.run_dashboard import run_dashboard


def _never():
    raise AssertionError("the session must not be opened for bad options")


def test_bad_theme_and_refresh_exit_2_with_one_line(capsys):
    assert run_dashboard(_never, theme="neon") == 2
    err = capsys.readouterr().err
    assert err == "sensorlm-tui: error: --theme 'neon': unknown theme; allowed: dark, light, high-contrast, ansi\n"
    assert run_dashboard(_never, refresh=10) == 2
    err = capsys.readouterr().err
    assert err == "sensorlm-tui: error: --refresh 10: plot redraws per second must be > 0 and <= 2\n"
