"""Pilot tests of the control keys against a scripted engine: what is sent, and what the screen says."""

from __future__ import annotations

import pytest

from engine.core.invocation import program
from engine.run.control.requests import Request
from tests.tui.tui_helpers import burst, make, on_screen, opened, pilot_test, wait_for
from tui.dashboard.app import DashboardApp
from tui.dashboard.scripted import ScriptedSession, accept_policy, demo_memory, demo_run


async def _open_tune(pilot, app):
    """t, then the tune modal once it is the screen and mounted. The screen is on top as soon as it is pushed, before
    its fields are composed: under load a test that set a field then met a Select without its overlay (NoMatches
    in Select's own mount, the app crashed) or found no #tune-estimate. A widget is mounted only after everything
    it composed is, so the mounted screen has every field in place."""
    await pilot.press("t")
    await on_screen(pilot, "TuneScreen")
    await wait_for(pilot, lambda: app.screen.is_mounted, "the tune modal mounted")
    return app.screen


@pilot_test
async def test_space_pauses_then_resumes_and_the_badge_follows():
    app, session = make()
    async with opened(app) as pilot:
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
    async with opened(app) as pilot:
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
    async with opened(app) as pilot:
        await pilot.press("a")
        await on_screen(pilot, "AbortScreen")
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
    async with opened(app) as pilot:
        await pilot.press("a", "n")
        await wait_for(pilot, lambda: app.return_code is not None, "app exit")
    assert [(r.action, r.mode) for r in session.sent] == [("abort", "now")]
    assert app.return_code == 130
    assert "interrupted at step 300" in app.summary


@pilot_test
async def test_abort_escape_cancels_and_sends_nothing():
    app, session = make()
    async with opened(app) as pilot:
        await pilot.press("a")
        await on_screen(pilot, "AbortScreen")
        await pilot.press("c")  # the dashboard's keys are inert behind the modal
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.status_text == "abort cancelled", "cancel message")
        assert app.return_code is None
    assert session.sent == []


@pilot_test
async def test_q_detaches_at_once_saying_what_the_engine_does_and_how_to_attach_or_stop_it():
    session = ScriptedSession(history=demo_run(300), detachable=True, run_dir="runs/demo-run")
    app, _ = make(session)
    async with opened(app) as pilot:
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_code is not None, "app exit")
    assert session.sent == [], "detaching sends nothing: the engine keeps running"
    assert app.return_code == 0
    assert app.summary == ("detached from demo-run at step 300; the engine keeps running (training · 2 steps/s · "
                           f"pid 4242). Attach: {program()} attach runs/demo-run · stop: kill -INT 4242 (it "
                           "checkpoints first)")
    assert app.wait_closed(5) and session.closed.is_set()


@pilot_test
async def test_ctrl_c_stops_gracefully_and_a_second_ctrl_c_stops_at_once():
    app, session = make(ScriptedSession(history=demo_run(300), detachable=True, run_dir="runs/demo-run",
                                        ack_delay=3.0))
    async with opened(app) as pilot:
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: session.sent, "the graceful abort sent")
        assert "Ctrl-C again stops at once" in app.status_text
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: app.return_code is not None, "app exit")
    assert [(r.action, r.mode) for r in session.sent] == [("abort", "graceful"), ("abort", "now")]
    assert app.return_code in (0, 130)  # whichever reached the scripted engine's end first


@pilot_test
async def test_ctrl_c_once_ends_with_the_checkpoint_and_one_line():
    app, session = make()
    async with opened(app) as pilot:
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: app.return_code is not None, "app exit")
    assert [(r.action, r.mode) for r in session.sent] == [("abort", "graceful")]
    assert app.return_code == 0 and "\n" not in app.summary
    assert app.summary.startswith("demo-run: aborted at step 300 · ") and "checkpoint runs/scripted/" in app.summary


@pilot_test
async def test_quit_in_process_has_no_detach_and_g_aborts():
    app, session = make()  # no run dir: an in-process-like session
    async with opened(app) as pilot:
        await pilot.press("q")
        await on_screen(pilot, "QuitScreen")
        await pilot.press("d")
        await wait_for(pilot, lambda: "cannot detach" in str(app.screen.query_one("#quit-body").render()),
                       "refusal to detach")
        assert app.return_code is None
        await pilot.press("g")
        await wait_for(pilot, lambda: app.return_code is not None, "app exit")
    assert [(r.action, r.mode) for r in session.sent] == [("abort", "graceful")]


def _estimate(tune) -> str:
    return str(tune.query_one("#tune-estimate").render())


@pytest.mark.slow
@pilot_test
async def test_tune_asks_the_engine_once_per_settled_value_and_applies():
    app, session = make()
    async with opened(app) as pilot:
        tune = await _open_tune(pilot, app)
        assert "budget 8 GiB" in _estimate(tune)
        tune.query_one("#tune-batch_size").focus()
        # Typed as fast as a terminal reads keys (pilot.press waits for the app between keys, which under load can
        # outlast the debounce): one dry run, after the last key.
        await burst(pilot, "end", "backspace", "backspace", "6", "4")
        await wait_for(pilot, lambda: "fits" in _estimate(tune), "the engine's prediction for batch 64")
        assert "predicted peak 7 GiB" in _estimate(tune) and f"({7 << 30} B) of budget 8 GiB" in _estimate(tune)
        assert [(r.name, r.value, r.dry_run) for r in session.sent] == [("batch_size", 64, True)]
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: tune.results, "ack in the tune modal")
        assert "batch_size 32 → 64: applied" in tune.results[0]
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.model.setting("batch_size") == 64, "setting on the model")
    assert [(r.name, r.value, r.dry_run) for r in session.sent][-1] == ("batch_size", 64, False)
    assert app.model.markers[-1].name == "batch_size" and app.model.markers[-1].new == 64


@pytest.mark.slow
@pilot_test
async def test_every_number_field_takes_a_burst_of_keys_in_the_order_typed():
    # Keys read together used to act out of order: a field's Backspace / End ran only after the key had bubbled up
    # to the app, so the digits typed after it were inserted first (tui.widgets.fields).
    app, _ = make()
    async with opened(app) as pilot:
        tune = await _open_tune(pilot, app)
        fields = [s.name for s in tune.settings if s.kind != "choice"]
        assert fields == ["batch_size", "grad_accum", "lr", "window"]
        typed = {}
        for name in fields:
            field = tune.query_one(f"#tune-{name}")
            field.focus()
            field.value = "64"
            await burst(pilot, "end", "backspace", "backspace", "6", "4")
            typed[name] = [field.value]
            await burst(pilot, "backspace", "5")  # the cursor at the end: replaces the last digit
            typed[name].append(field.value)
            await burst(pilot, "home", "delete", "1", "end", "backspace", "2", "3")  # 65 → 5 → 15 → 1 → 123
            typed[name].append(field.value)
        assert typed == {name: ["64", "65", "123"] for name in fields}
        # Tab in a burst moves on before the keys after it: each field gets its own digits.
        tune.query_one("#tune-batch_size").focus()
        await pilot.pause(0.1)
        await burst(pilot, "end", "backspace", "backspace", "backspace", "4", "8", "tab", "end", "backspace",
                    "backspace", "backspace", "2", "tab", "end", "backspace", "backspace", "backspace", "1")
        assert [tune.query_one(f"#tune-{name}").value for name in fields[:3]] == ["48", "2", "1"]
        # A key the force checkbox does not answer stays there: it is not run on the field focused after it.
        tune.query_one("#tune-force").focus()
        await pilot.pause(0.1)
        await burst(pilot, "backspace", "7", "tab", "end", "backspace", "9")
        assert tune.query_one("#tune-batch_size").value == "49" and not tune.query_one("#tune-force").value


@pytest.mark.slow
@pilot_test
async def test_a_fixed_value_takes_its_error_away_from_the_tune_modal():
    app, session = make()
    async with opened(app) as pilot:
        tune = await _open_tune(pilot, app)
        results = tune.query_one("#tune-results")
        tune.query_one("#tune-lr").value = "1e308"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: "fix first" in str(results.render()), "the refusal to apply")
        assert str(results.render()) == "fix first: lr 1e+308 is out of range; allowed: >0..10"
        tune.query_one("#tune-lr").value = "0.001"
        await wait_for(pilot, lambda: "lr → 0.001" in _estimate(tune), "the fixed value's estimate")
        assert str(results.render()) == "", "the error of a value no longer in the form"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: tune.results, "the fixed value applied")
        assert str(results.render()) == "lr 0.002 → 0.001: applied"
        tune.query_one("#tune-lr").value = "0.001"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: "nothing changed" in str(results.render()), "nothing to apply")
        tune.query_one("#tune-grad_accum").value = "2"
        await wait_for(pilot, lambda: "nothing changed" not in str(results.render()), "the note gone with the edit")
        assert str(results.render()) == "lr 0.002 → 0.001: applied"
    assert [(r.name, r.value) for r in session.sent if not r.dry_run] == [("lr", 0.001)]


@pilot_test
async def test_tune_lists_the_tasks_declared_settings_and_sends_only_what_was_edited():
    app, session = make()
    async with opened(app) as pilot:
        tune = await _open_tune(pilot, app)
        assert [s.name for s in tune.settings] == ["batch_size", "grad_accum", "lr", "kernel", "window"]
        assert tune.query_one("#tune-kernel").value == "fast" and tune.query_one("#tune-window").value == "256"
        tune.query_one("#tune-kernel").value = "lean"
        await wait_for(pilot, lambda: "fits" in _estimate(tune), "prediction for the lean kernel")
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: tune.results, "ack")
        assert tune.results == ["[$success]kernel fast → lean: applied[/]"]
    assert [(r.name, r.value, r.dry_run) for r in session.sent] == [("kernel", "lean", True),
                                                                    ("kernel", "lean", False)], "no rounded LR re-sent"


@pilot_test
async def test_tune_predicts_and_applies_the_pair_being_applied_together():
    # demo_memory: 1 GiB + 96 MiB a sample, half with the lean kernel; budget 8 GiB. Batch 100 alone is over
    # (10.4 GiB); with the lean kernel beside it, it fits (5.7 GiB): only the pair tells the truth.
    app, session = make()
    async with opened(app) as pilot:
        tune = await _open_tune(pilot, app)
        tune.query_one("#tune-kernel").value = "lean"
        tune.query_one("#tune-batch_size").value = "100"
        await wait_for(pilot, lambda: "together (" in _estimate(tune) and "asking" not in _estimate(tune),
                       "the prediction of both changes together")
        lines = _estimate(tune).splitlines()
        assert lines[0].startswith("together (batch_size=100, kernel=lean): fits"), lines
        assert any(line.startswith("batch_size → 100: won't fit") for line in lines), lines
        pair = [r for r in session.sent if r.dry_run and r.together]
        assert len(pair) == 1 and pair[0].changes == {"batch_size": 100, "kernel": "lean"}
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: tune.results, "ack")
        assert tune.results == ["[$success]together batch_size → 100, kernel → lean: applied[/]"]
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.model.setting("batch_size") == 100 and app.model.setting("kernel") == "lean",
                       "both settings on the model")
    applied = [r for r in session.sent if not r.dry_run]
    assert len(applied) == 1 and applied[0].changes == {"batch_size": 100, "kernel": "lean"}, "judged as one"


@pytest.mark.slow
@pilot_test
async def test_tune_shows_each_range_and_refuses_a_value_outside_it_without_asking():
    app, session = make()
    async with opened(app) as pilot:
        tune = await _open_tune(pilot, app)
        labels = {s.name: str(tune.query_one(f"#tune-label-{s.name}").render()) for s in tune.settings}
        assert labels["lr"].endswith(">0..10") and labels["batch_size"].endswith("1..1000000")
        assert labels["window"].endswith("1..4096") and labels["kernel"] == "kernel"
        tune.query_one("#tune-lr").value = "1e308"
        await wait_for(pilot, lambda: "out of range" in _estimate(tune), "the range error")
        assert _estimate(tune) == "lr 1e+308 is out of range; allowed: >0..10"
        tune.query_one("#tune-lr").value = "0.001"
        tune.query_one("#tune-window").value = "0"
        await wait_for(pilot, lambda: "window 0" in _estimate(tune), "the task setting's range error")
        await pilot.press("ctrl+s")
        await pilot.pause(0.5)
    assert session.sent == [], "an out-of-range value is never sent"


@pilot_test
async def test_tune_says_when_the_engine_cannot_predict_instead_of_guessing():
    def old_engine(request, s):  # an engine from before dry runs: it answers as if the request were real
        return accept_policy(Request("set", name=request.name, value=request.value, id=request.id), s)

    app, _ = make(ScriptedSession(history=demo_run(300), policy=old_engine))
    async with opened(app) as pilot:
        await _open_tune(pilot, app)
        app.screen.query_one("#tune-batch_size").value = "64"
        await wait_for(pilot, lambda: "no prediction" in _estimate(app.screen), "no prediction")
        assert "does not answer dry runs" in _estimate(app.screen) and "fits" not in _estimate(app.screen)
    app, session = make(ScriptedSession(history=demo_run(300, finished=True), memory=demo_memory))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.model.ended and app.session is not None, "ended run loaded")
        await _open_tune(pilot, app)
        app.screen.query_one("#tune-batch_size").value = "64"
        await wait_for(pilot, lambda: "run has ended" in _estimate(app.screen), "ended: cannot predict")
        await pilot.pause(0.5)
    assert session.sent == []


@pilot_test
async def test_a_read_only_viewer_sees_predictions_but_cannot_apply():
    app, session = make(ScriptedSession(history=demo_run(300), memory=demo_memory, read_only=True), read_only=True)
    async with opened(app) as pilot:
        tune = await _open_tune(pilot, app)
        assert not tune.query("#tune-force")
        tune.query_one("#tune-batch_size").value = "128"
        await wait_for(pilot, lambda: "won't fit" in _estimate(tune), "prediction for a read-only viewer")
        await pilot.press("ctrl+s")
        assert "read-only viewer: nothing can be applied" in str(tune.query_one("#tune-results").render())
    assert [(r.name, r.value, r.dry_run) for r in session.sent] == [("batch_size", 128, True)]


@pytest.mark.slow
@pilot_test
async def test_tune_shows_wont_fit_with_the_bytes_the_real_engine_refuses_with(tmp_path):
    from engine.app.inprocess import InProcessSession
    from engine.app.prepare import prepare
    from engine.core.cli_args import OneLineParser, add_train_arguments

    parser = OneLineParser(prog="t")
    add_train_arguments(parser)
    prepared = prepare(parser.parse_args(["--task", "toy", "--threads", "1", "--run-dir", str(tmp_path / "r"),
                                          "--device", "cpu", "--vram-gb", "0.03", "--max-steps", "100000",
                                          "--eval-every", "0", "--set", "runtime.data_workers=0"]))
    session = InProcessSession(prepared)
    app = DashboardApp(lambda: session, in_process=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.model.step > 0 and app.session is not None, "the engine training",
                       timeout=60)
        tune = await _open_tune(pilot, app)
        tune.query_one("#tune-batch_size").value = "100000"
        await wait_for(pilot, lambda: ("batch_size", 100000) in tune.answers, "the engine's prediction", timeout=30)
        predicted = tune.answers[("batch_size", 100000)]
        assert not predicted.fits and predicted.predicted > predicted.budget
        assert "won't fit" in _estimate(tune) and f"({predicted.predicted} B)" in _estimate(tune)
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: tune.results, "the engine's refusal", timeout=30)
        assert "refused" in tune.results[0] and predicted.refused in tune.results[0]
        assert f"(predicted peak {predicted.predicted} B of budget {predicted.budget} B)" in tune.results[0]
        assert app.model.setting("batch_size") != 100000
        app.exit()
    session.close()


@pilot_test
async def test_a_tune_applied_then_closed_before_its_answer_still_reaches_the_dashboard():
    # The modal sends from its own worker; the answer to a real request reaches the app whoever sent it, so
    # closing the modal while the engine is still answering loses nothing the dashboard shows.
    app, session = make(ScriptedSession(history=demo_run(300), memory=demo_memory, ack_delay=1.0))
    async with opened(app) as pilot:
        tune = await _open_tune(pilot, app)
        tune.query_one("#tune-grad_accum").value = "2"
        await wait_for(pilot, lambda: "fits" in _estimate(tune), "the prediction for grad_accum 2")
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: any(not r.dry_run for r in session.sent), "the change sent")
        await pilot.press("escape")
        await on_screen(pilot, "DashboardScreen")
        await wait_for(pilot, lambda: app.status_text.startswith("set grad_accum=2: done"), "the answer said")
        assert app.model.setting("grad_accum") == 2 and app.model.markers[-1].name == "grad_accum"


@pilot_test
async def test_enter_on_the_force_checkbox_applies_it_ticked_and_the_change_says_forced():
    app, session = make()
    async with opened(app) as pilot:
        tune = await _open_tune(pilot, app)
        tune.query_one("#tune-batch_size").value = "64"
        force = tune.query_one("#tune-force")
        force.focus()
        await pilot.press("space")
        assert force.value is True
        await pilot.press("enter")
        await wait_for(pilot, lambda: tune.results, "ack in the tune modal")
        assert force.value is True, "enter applies; it must not un-tick the force it sends"
        assert app.status_text.startswith("set batch_size=64 (forced): done")
    assert [(r.name, r.value, r.force) for r in session.sent if not r.dry_run] == [("batch_size", 64, True)]


@pilot_test
async def test_toggles_change_the_loss_plot():
    app, _ = make()
    async with opened(app) as pilot:
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
    async with opened(app) as pilot:
        for key in ("space", "c", "a"):
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
        await on_screen(pilot, "HelpScreen")
        await pilot.press("escape")
        await on_screen(pilot, "DashboardScreen")


@pytest.mark.slow
@pilot_test
async def test_command_palette_runs_a_control_and_switches_theme():
    app, session = make()
    async with opened(app) as pilot:
        await pilot.press("ctrl+p")
        await on_screen(pilot, "CommandPalette")
        await pilot.press(*"run: checkpoint now")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_for(pilot, lambda: session.sent, "checkpoint request")
        await pilot.press("ctrl+p")
        await on_screen(pilot, "CommandPalette")
        await pilot.press(*"theme: high-contrast")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.theme == "sensorlm-high-contrast", "theme switched")
    assert [r.action for r in session.sent] == ["checkpoint_now"]
