"""Pilot tests of the control keys against a scripted engine: what is sent, and what the screen says."""

from __future__ import annotations

from tests.tui.tui_helpers import loaded, make, pilot_test, wait_for
from tui.scripted import ScriptedSession, demo_run


@pilot_test
async def test_space_pauses_then_resumes_and_the_badge_follows():
    app, session = make()
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("space")
        await wait_for(pilot, lambda: app.model.state == "paused", "paused state")
        assert app.status_text == "pause: done (state: running → paused)"
        app.redraw()
        assert "PAUSED" in str(app.dashboard.query_one("#header-badge").render())
        await pilot.press("space")
        await wait_for(pilot, lambda: app.model.state == "running", "running again")
    assert [r.action for r in session.sent] == ["pause", "resume"]


@pilot_test
async def test_c_checkpoints_and_the_log_shows_path_size_and_seconds():
    app, session = make()
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("c")
        await wait_for(pilot, lambda: any(c.kind == "manual" for c in app.model.checkpoints), "manual checkpoint")
        log = app.dashboard.query_one("#log")
        await wait_for(pilot, lambda: any("(manual)" in line for line in log.plain), "checkpoint log line")
    assert [r.action for r in session.sent] == ["checkpoint_now"]
    line = next(line for line in log.plain if "(manual)" in line)
    assert "runs/scripted/checkpoints/last.safetensors" in line and "11.8 MiB" in line and "0.42s" in line


@pilot_test
async def test_abort_graceful_exits_once_stopped_with_checkpoint_and_resume_command():
    app, session = make()
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("a")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "AbortScreen", "abort modal")
        await pilot.press("g")
        await wait_for(pilot, lambda: app.return_code is not None, "app exit")
    assert [(r.action, r.mode) for r in session.sent] == [("abort", "graceful")]
    assert app.return_code == 0
    assert app.summary == ("demo-run: aborted at step 300 · best val score 24.91 dB @ 300 · "
                           "checkpoint runs/scripted/checkpoints/last.safetensors · "
                           "resume: sensorlm-tui train --resume runs/scripted")
    assert app.wait_closed(5) and session.closed.is_set()


@pilot_test
async def test_abort_now_returns_the_engines_exit_code():
    app, session = make()
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("a", "n")
        await wait_for(pilot, lambda: app.return_code is not None, "app exit")
    assert [(r.action, r.mode) for r in session.sent] == [("abort", "now")]
    assert app.return_code == 130
    assert "interrupted at step 300" in app.summary


@pilot_test
async def test_abort_escape_cancels_and_sends_nothing():
    app, session = make()
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("a")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "AbortScreen", "abort modal")
        await pilot.press("c")  # the dashboard's keys are inert behind the modal
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.status_text == "abort cancelled", "cancel message")
        assert app.return_code is None
    assert session.sent == []


@pilot_test
async def test_quit_while_running_offers_detach_in_process_mode():
    session = ScriptedSession(history=demo_run(300), detachable=True, run_dir="runs/demo-run")
    app, _ = make(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("q")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "QuitScreen", "quit modal")
        body = str(app.screen.query_one("#quit-body").render())
        assert "detach" in body and "sensorlm-tui attach runs/demo-run" in body
        await pilot.press("d")
        await wait_for(pilot, lambda: app.return_code is not None, "app exit")
    assert session.sent == [], "detaching sends nothing: the engine keeps running"
    assert app.return_code == 0
    assert app.summary == ("detached from demo-run at step 300; the engine keeps running. "
                           "Re-attach: sensorlm-tui attach runs/demo-run")
    assert app.wait_closed(5) and session.closed.is_set()


@pilot_test
async def test_quit_in_process_has_no_detach_and_g_aborts():
    app, session = make()  # no run dir: an in-process-like session
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("q")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "QuitScreen", "quit modal")
        await pilot.press("d")
        await wait_for(pilot, lambda: "cannot detach" in str(app.screen.query_one("#quit-body").render()),
                       "refusal to detach")
        assert app.return_code is None
        await pilot.press("g")
        await wait_for(pilot, lambda: app.return_code is not None, "app exit")
    assert [(r.action, r.mode) for r in session.sent] == [("abort", "graceful")]


@pilot_test
async def test_tune_apply_sends_the_changed_settings_and_shows_applied():
    app, session = make()
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("t")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "TuneScreen", "tune modal")
        tune = app.screen
        assert "of budget 8 GiB" in str(tune.query_one("#tune-estimate").render())
        tune.query_one("#tune-batch").value = "64"
        await wait_for(pilot, lambda: "4.75 GiB" in str(tune.query_one("#tune-estimate").render()),
                       "estimate for batch 64")
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: tune.results, "ack in the tune modal")
        assert "batch_size 32 → 64: applied" in tune.results[0]
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.model.setting("batch_size") == 64, "setting on the model")
    assert [(r.action, r.name, r.value) for r in session.sent] == [("set", "batch_size", 64)]
    assert app.model.markers[-1].name == "batch_size" and app.model.markers[-1].new == 64


@pilot_test
async def test_tune_refused_shows_the_engines_reason():
    why = "predicted peak 9.75 GiB over budget 8 GiB"
    app, session = make(ScriptedSession(history=demo_run(300), refuse={"batch_size": why}))
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("t")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "TuneScreen", "tune modal")
        tune = app.screen
        tune.query_one("#tune-batch").value = "128"
        await wait_for(pilot, lambda: "won't fit" in str(tune.query_one("#tune-estimate").render()), "won't fit")
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: tune.results, "refusal in the tune modal")
        assert tune.results == [f"[$error]batch_size → 128: refused — {why}[/]"]
        assert app.status_text == f"set batch_size=128: refused — {why}"
    assert [(r.name, r.value) for r in session.sent] == [("batch_size", 128)]
    assert app.model.setting("batch_size") == 32


@pilot_test
async def test_enter_on_the_force_checkbox_applies_it_ticked_and_the_change_says_forced():
    app, session = make()
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("t")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "TuneScreen", "tune modal")
        tune = app.screen
        tune.query_one("#tune-batch").value = "64"
        force = tune.query_one("#tune-force")
        force.focus()
        await pilot.press("space")
        assert force.value is True
        await pilot.press("enter")
        await wait_for(pilot, lambda: tune.results, "ack in the tune modal")
        assert force.value is True, "enter applies; it must not un-tick the force it sends"
        assert app.status_text.startswith("set batch_size=64 (forced): done")
    assert [(r.name, r.value, r.force) for r in session.sent] == [("batch_size", 64, True)]


@pilot_test
async def test_toggles_change_the_loss_plot():
    app, _ = make()
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        plot = app.dashboard.query_one("#chart-1")
        builds = plot.builds
        await pilot.press("l", "s", "h")
        await pilot.pause(0.1)
        assert (plot.log_y, plot.smoothing, plot.window) == (True, 4, "full")
        assert app.status_text == "charts: full history"
        await wait_for(pilot, lambda: plot.builds > builds, "plot rebuilt")  # the title is set when it redraws
        await wait_for(pilot, lambda: plot.title_text.startswith(
            "[b]loss[/b] · [$primary]EMA 0.99[/] · full history · log-y"), "the toggles in the plot title")
        await pilot.press("s")
        assert plot.smoothing == 0
        await wait_for(pilot, lambda: plot.title_text.startswith("[b]loss[/b] · raw"), "raw in the plot title")


@pilot_test
async def test_read_only_keys_do_nothing_and_say_why():
    app, session = make(read_only=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        for key in ("space", "c", "a", "t"):
            await pilot.press(key)
            await pilot.pause(0.05)
            assert "read-only viewer — controls are disabled" in app.status_text, key
            assert type(app.screen).__name__ == "DashboardScreen", key
        await pilot.press("q")  # a read-only viewer just detaches
        await wait_for(pilot, lambda: app.return_code is not None, "app exit")
    assert session.sent == []
    assert "detached from demo-run" in app.summary


@pilot_test
async def test_help_opens_and_closes():
    app, _ = make()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "HelpScreen", "help")
        await pilot.press("escape")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "DashboardScreen", "back to the dashboard")


@pilot_test
async def test_command_palette_runs_a_control_and_switches_theme():
    app, session = make()
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "CommandPalette", "palette")
        await pilot.press(*"run: checkpoint now")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_for(pilot, lambda: session.sent, "checkpoint request")
        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "CommandPalette", "palette again")
        await pilot.press(*"theme: high-contrast")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.theme == "sensorlm-high-contrast", "theme switched")
    assert [r.action for r in session.sent] == ["checkpoint_now"]


@pilot_test
async def test_tune_sends_only_what_was_edited():
    app, session = make()
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("t")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "TuneScreen", "tune modal")
        app.screen.query_one("#tune-backend").value = "math"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: app.screen.results, "ack")
        assert app.screen.results == ["[$success]attn_backend sdpa → math: applied[/]"]
    assert [(r.name, r.value) for r in session.sent] == [("attn_backend", "math")], "no rounded LR re-sent"


@pilot_test
async def test_tune_with_the_real_analytic_estimator_predicts_from_the_run_config():
    from tui.estimate import default_estimator

    estimator = default_estimator()
    if estimator is None:
        import pytest

        pytest.skip("engine.budget.analytic not installed")
    # The analytic model validates RunStarted.config: the demo run must name a real task here.
    app, _ = make(ScriptedSession(history=demo_run(300, task="sensorlm")), estimator=estimator)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("t")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "TuneScreen", "tune modal")
        estimate = str(app.screen.query_one("#tune-estimate").render())
        assert estimate.startswith("predicted peak ") and "of budget 8 GiB" in estimate and "fits" in estimate
        grid = str(app.screen.query_one("#tune-grid").render())
        assert "?" not in grid and "▶" in grid
