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


def test_a_bad_refresh_is_refused_before_an_engine_starts(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(["train", "--refresh", "5", "--name", "x"])
    assert info.value.code == 2 and "must be > 0 and <= 2" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists(), "nothing written"


@pytest.mark.slow
def test_an_engine_the_dashboard_never_opened_is_stopped(tmp_path) -> None:
    # train spawns its engine before the dashboard imports Textual; a dashboard that never opens its session
    # (it failed to start) must not leave that engine training unseen.
    from tui.commands.train import LaunchingSession

    factory = LaunchingSession(["--task", "toy", "--threads", "1", "--max-steps", "5"], tmp_path / "r")
    factory.start()
    pid = factory.starting.pid
    line = factory.stop_unopened()
    assert line.startswith("stopped the engine") and "nothing was trained" in line
    assert factory.starting.process.poll() is not None, f"engine {pid} ended"
