"""What a user looks at: the metric chooser, the compare overlay, start-up phases, the state-driven footer,
the memory gauge, and the layout details (units, paths, the final LR, --theme)."""

from __future__ import annotations

import numpy as np
import pytest
from textual.widgets import OptionList

from engine.run import events as ev
from tests.tui.tui_helpers import make, on_screen, opened, pilot_test, wait_for
from tui.dashboard.scripted import ScriptedSession, demo_run
from tui.model.dashboard import RunModel
from tui.model.format import bytes_pair, middle_ellipsis


def _footer(app) -> list[str]:
    """The key labels the footer shows now."""
    return [key.description for key in app.dashboard.query("FooterKey")]


async def _choose(pilot, app, name: str) -> None:
    await pilot.press("m")
    await on_screen(pilot, "MetricScreen")
    listing = app.screen.query_one(OptionList)
    index = next(i for i in range(listing.option_count) if listing.get_option_at_index(i).id == name)
    listing.highlighted = index
    await pilot.press("enter")
    await on_screen(pilot, "DashboardScreen")


@pytest.mark.slow
@pilot_test
async def test_chooser_switches_a_chart_to_grad_norm_and_back_to_the_primary():
    app, _ = make()
    async with opened(app) as pilot:
        chart = app.dashboard.query_one("#chart-2")
        await wait_for(pilot, lambda: chart.title_text.startswith("[b]val score[/b] dB"), "primary by default")
        assert "★24.91" in chart.title_text and "abort <23.41" in chart.title_text
        await _choose(pilot, app, "grad_norm")
        assert chart.shown(app.model) == "grad_norm"
        await wait_for(pilot, lambda: chart.title_text.startswith("[b]grad norm[/b]"), "grad norm title")
        assert app.status_text == "chart 2: grad norm"
        assert chart.series(app.model, 60)["env"].count.sum() == 300
        await _choose(pilot, app, "score")
        await wait_for(pilot, lambda: chart.title_text.startswith("[b]val score[/b]"), "back to the primary")


@pilot_test
async def test_typing_in_the_chooser_jumps_to_a_metric():
    app, _ = make()
    async with opened(app, (80, 24)) as pilot:
        await pilot.press("m")
        await on_screen(pilot, "MetricScreen")
        await pilot.press("g", "enter")
        chart = app.dashboard.query_one("#chart-1")  # the one chart on screen at 80 columns
        await wait_for(pilot, lambda: chart.shown(app.model) == "grad_norm", "grad norm chosen by typing g")
        await pilot.press("m", "l", "o", "enter")
        await wait_for(pilot, lambda: chart.shown(app.model) == "loss", "loss chosen by typing lo")


@pytest.mark.slow
@pilot_test
async def test_the_chooser_filter_takes_every_typed_character_and_digits_pick_a_chart_only_when_empty():
    app, _ = make()
    async with opened(app) as pilot:
        await pilot.press("m")
        await on_screen(pilot, "MetricScreen")
        title = app.screen.query_one("#metric-title")
        assert str(title.render()) == "Show in chart 2 · on screen: 1 [2]", "the target in words: not 'chart 1 [2]'"
        await pilot.press("1")  # the filter is empty: a digit picks the chart
        assert app.screen.target == 1 and app.screen.filter_text == ""
        assert str(title.render()) == "Show in chart 1 · on screen: [1] 2"
        await pilot.press(*"recall 1")  # after a word, a digit is part of the filter
        field = app.screen.query_one("#metric-filter")
        assert app.screen.filter_text == "recall 1" and field.display, "the filter is on screen"
        assert app.screen.target == 1
        assert [c.name for c in app.screen.shown] == ["recall_at_1"]
        await pilot.press("enter")
        await on_screen(pilot, "DashboardScreen")
        assert app.dashboard.query_one("#chart-1").shown(app.model) == "recall_at_1"


@pilot_test
async def test_the_evaluation_before_the_first_step_is_a_point_of_the_loss_chart():
    run = demo_run(300)
    first = next(i for i, e in enumerate(run) if isinstance(e, ev.StepLogged))
    run.insert(first, ev.EvalDone(step=0, val_loss=2.4, metrics={"val_loss": 2.4, "score": 17.0}, primary="score",
                                  seconds=1.5, t=run[0].t))
    app, _ = make(ScriptedSession(history=run))
    async with opened(app) as pilot:
        chart = app.dashboard.query_one("#chart-1")
        for key in ("", "h"):  # the last 1000 steps (the whole run here), then the full history
            if key:
                await pilot.press(key)
            x, y = chart.series(app.model, 80)["val"]
            assert x[0] == 0 and y[0] == 2.4 and chart.extent(app.model)[0] == 0, (key, x[:3])


@pilot_test
async def test_val_loss_is_overlaid_on_the_training_loss():
    app, _ = make()
    async with opened(app) as pilot:
        chart = app.dashboard.query_one("#chart-1")
        data = chart.series(app.model, 60)
        assert data["env"].count.sum() == 300 and len(data["val"][0]) == 6  # evals at 50 … 300
        await wait_for(pilot, lambda: "[$warning]●[/] val_loss" in chart.title_text, "val legend")


@pilot_test
async def test_narrow_layout_shows_one_chart_and_v_switches_it():
    app, _ = make()
    async with opened(app, (80, 24)) as pilot:
        assert [c.id for c in app.dashboard.visible_charts()] == ["chart-1"]
        await pilot.press("v")
        await pilot.pause(0.05)
        assert [c.id for c in app.dashboard.visible_charts()] == ["chart-2"]
    big, _ = make()
    async with opened(big, (180, 56)) as pilot:
        assert [c.id for c in big.dashboard.visible_charts()] == ["chart-1", "chart-2", "chart-3", "chart-4"]


@pilot_test
async def test_compare_overlay_appears_aligned_by_step(tmp_path):
    other = tmp_path / "runs" / "older"
    other.mkdir(parents=True)
    (other / "events.jsonl").write_text("".join(ev.to_json(e) + "\n" for e in demo_run(200, seed=3, name="older")))
    app, _ = make(compare=str(other))
    async with opened(app) as pilot:
        await wait_for(pilot, lambda: app.model.compare is not None, "compare run read")
        chart = app.dashboard.query_one("#chart-1")
        await wait_for(pilot, lambda: "┄ older" in chart.title_text, "compare legend")
        data = chart.series(app.model, 60)
        drawn = data["env"].x[np.isfinite(data["cmp"])]
        assert drawn.min() == 1 and 195 <= drawn.max() <= 200, "the other run's steps, on this run's step axis"
        assert "cmp_val" in app.dashboard.query_one("#chart-2").series(app.model, 60)
        assert app.status_text.startswith("compare: older (200 steps) overlaid")


@pilot_test
async def test_compare_of_a_missing_run_is_one_line_in_the_status(tmp_path):
    app, _ = make(compare=str(tmp_path / "nope"))
    async with opened(app) as pilot:
        await wait_for(pilot, lambda: app.status_text.startswith("compare "), "compare error")
        assert "not a run" in app.status_text and app.model.compare is None


@pytest.mark.slow
@pilot_test
async def test_run_picker_overlays_the_chosen_run_and_x_clears_it(tmp_path):
    runs = tmp_path / "runs"
    for name, steps in (("older", 120), ("oldest", 60)):
        (runs / name).mkdir(parents=True)
        (runs / name / "events.jsonl").write_text("".join(ev.to_json(e) + "\n" for e in demo_run(steps, name=name)))
    this = runs / "demo-run"
    this.mkdir()
    app, _ = make(ScriptedSession(history=demo_run(300), run_dir=this))
    async with opened(app) as pilot:
        await pilot.press("o")
        await on_screen(pilot, "RunPickerScreen")
        listing = app.screen.query_one(OptionList)
        ids = [listing.get_option_at_index(i).id for i in range(listing.option_count)]
        assert sorted(ids) == sorted(str(runs / n) for n in ("older", "oldest")), "this run is not offered"
        listing.highlighted = ids.index(str(runs / "oldest"))
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.model.compare is not None, "compare run read")
        assert app.model.compare.step == 60
        await wait_for(pilot, lambda: "┄ oldest" in app.dashboard.query_one("#chart-1").title_text, "legend")
        await pilot.press("o")
        await on_screen(pilot, "RunPickerScreen")
        await pilot.press("x")
        await wait_for(pilot, lambda: app.model.compare is None, "overlay cleared")
        assert app.status_text == "compare: cleared"


@pilot_test
async def test_status_line_shortens_paths_in_the_middle_and_wraps_the_rest():
    app, _ = make()
    async with opened(app, (80, 24)) as pilot:
        path = "/home/someone/experiments/2026-12-03/runs/a-rather-long-run-name/checkpoints/last.safetensors"
        app.say(f"checkpoint: done {path}")
        await pilot.pause(0.05)
        status = app.dashboard.query_one("#status")
        shown = str(status.render())
        assert "…" in shown and shown.startswith("checkpoint: done /home/") and shown.endswith("last.safetensors")
        assert status.size.height == 1
        app.say("set batch_size=128: refused — " + "predicted peak 9.1 GiB is over the budget 8 GiB " * 3)
        await pilot.pause(0.1)
        assert status.size.height >= 2, "a long reason wraps instead of being cut off"
        assert str(status.render()).rstrip().endswith("budget 8 GiB")


@pilot_test
async def test_the_palette_offers_one_theme_system():
    app, _ = make()
    async with opened(app):
        titles = [command.title.lower() for command in app.get_system_commands(app.screen)]
        assert "theme" not in titles and "quit" in titles


@pytest.mark.slow
@pilot_test
async def test_footer_follows_the_state_resume_while_paused_none_when_ended():
    app, _ = make()
    async with opened(app) as pilot:
        await wait_for(pilot, lambda: "pause" in _footer(app), "pause in the footer")
        assert "resume" not in _footer(app) and "ckpt" in _footer(app)
        await pilot.press("space")
        await wait_for(pilot, lambda: app.model.state == "paused", "paused")
        await wait_for(pilot, lambda: "resume" in _footer(app), "resume in the footer")
        assert "pause" not in _footer(app)
        await pilot.press("space")
        await wait_for(pilot, lambda: app.model.state == "running", "running again")
        await wait_for(pilot, lambda: "pause" in _footer(app), "pause back in the footer")
    ended, _ = make(ScriptedSession(history=demo_run(300, finished=True)))
    async with opened(ended) as pilot:
        await wait_for(pilot, lambda: "metric" in _footer(ended) and "pause" not in _footer(ended),
                       "no controls once ended")
        assert not {"ckpt", "abort", "tune", "resume"} & set(_footer(ended)) and "metric" in _footer(ended), \
            _footer(ended)
        await pilot.press("c")
        assert "the run has ended" in ended.status_text


@pilot_test
async def test_read_only_footer_has_no_control_keys():
    app, _ = make(read_only=True)
    async with opened(app) as pilot:
        await wait_for(pilot, lambda: "metric" in _footer(app), "footer drawn")
        assert not {"pause", "resume", "ckpt", "abort", "tune"} & set(_footer(app))


@pilot_test
async def test_start_up_phases_are_shown_before_the_first_step():
    phases = [ev.PhaseStarted(phase="importing torch", t=1000.0),
              ev.PhaseStarted(phase="building model", detail="1.23M params", t=1001.2)]
    app, _ = make(ScriptedSession(history=phases))
    async with app.run_test(size=(80, 24)) as pilot:
        chart = app.dashboard.query_one("#chart-1")
        await wait_for(pilot, lambda: "building model (1.23M params)" in str(chart.render()), "phases in the chart")
        text = str(chart.render())
        assert "starting up" in text and "✓ importing torch 1.2s" in text
        assert "building model" in app.dashboard.query_one("#progress").text


@pilot_test
async def test_every_start_up_clock_on_screen_counts_also_where_its_line_wraps():
    # A phase line wider than its chart wraps there; the chart repainted only the rows whose *line* changed, so
    # the wrapped clock stayed at its first value (0.0s) beside a chart whose line fit and counted.
    import re
    import time

    from tests.tui.screens import screen_text

    now = time.time()
    phases = [ev.PhaseStarted(phase="reading the config", t=now - 1.8),
              ev.PhaseStarted(phase="building data and model", detail="sensorlm/demo, 100k windows", t=now)]
    app, _ = make(ScriptedSession(history=phases))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.model.starting_up and app.dashboard.query_one("#chart-2").builds > 0,
                       "the phases in both charts")

        def clocks() -> list[float]:  # the running phase's clock in each chart (chart 2's line wraps at 100 columns)
            return [float(x) for x in re.findall(r"windows\)\s+(\d+\.\d)s", "\n".join(screen_text(app)))]

        await wait_for(pilot, lambda: len(clocks()) == 2 and min(clocks()) >= 1.5,
                       f"both clocks past 1.5 s: {clocks()}", timeout=6)


@pilot_test
async def test_an_in_process_dashboard_shows_the_trainers_first_phase_before_its_thread_reports_it():
    """The in-process trainer's thread imports torch first, holding the GIL: the phase is the app's to show."""
    import threading

    from tui.dashboard.app import DashboardApp

    release = threading.Event()

    def slow_factory():  # the session is not there yet: nothing has reported a phase
        release.wait(30)
        return ScriptedSession(history=[ev.PhaseStarted(phase="importing torch")])

    app = DashboardApp(slow_factory, in_process=True)
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: "importing torch" in str(app.dashboard.query_one("#chart-1").render()),
                           "the first phase on screen")
            assert [p.phase for p in app.model.phases] == ["importing torch"]
            release.set()
            await wait_for(pilot, lambda: app.session is not None, "the session")
            await pilot.pause(0.3)
            assert [p.phase for p in app.model.phases] == ["importing torch"]  # told again: the same phase
            app.exit()
    finally:
        release.set()


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
@pilot_test
async def test_the_progress_panels_throughput_numbers_agree(size):
    # The panel showed a smoothed steps/s beside the last step's own samples/s: 14.5 it/s · 1100 sa/s · bs 32.
    import re

    batch, steps = 32, 120
    history = [ev.RunStarted(name="r", task="toy", config={"train": {"batch_size": batch}}, total_steps=1000, t=1000.0)]
    for i in range(1, steps + 1):  # a step every 0.1 s; each step's own rates (compute alone) jump around 150/s
        own = 100.0 * (1 + 0.5 * (i % 4))
        history.append(ev.StepLogged(t=1000.0 + 0.1 * i, step=i, loss=1.0, steps_per_s=own, samples_per_s=own * batch,
                                     batch_size=batch))
    app, _ = make(ScriptedSession(history=history))
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.model.step == steps, "the steps")
        app.redraw(force=True)
        await pilot.pause(0.2)
        text = " ".join(app.dashboard.query_one("#progress").text.split())
        rate = float(re.search(r"([\d.,]+) (?:steps|it)/s", text).group(1))
        shown = re.search(r"([\d.,]+) (?:samples|sa)/s", text)
        assert abs(rate - 10.0) < 0.2, text
        assert re.search(rf"\b(batch|bs) {batch}\b", text), text
        if shown:  # it may give way at 80 columns (the panel's least wanted number): never a wrong one
            assert abs(float(shown.group(1).replace(",", "")) / (rate * batch) - 1) < 0.05, text
        else:
            assert size == (80, 24), text


@pilot_test
async def test_memory_gauge_shows_predicted_against_measured_with_the_error():
    app, _ = make()
    async with opened(app) as pilot:
        memory = app.dashboard.query_one("#memory")
        await wait_for(pilot, lambda: "err" in memory.text, "memory drawn")
        assert "meas 2.02[/] · [$primary]pred 2.05 GiB" in memory.text and " %[/b]" in memory.text


def test_the_final_lr_is_the_last_steps_not_the_peak():
    from tui.widgets.progress import ProgressPanel

    m = RunModel()
    m.ingest(demo_run(30, finished=True) + [ev.StepLogged(step=31, loss=0.2, lr=0.0, t=2e9)])
    panel = ProgressPanel()
    assert "lr 0 ·" in panel.content(m), "a schedule that decays to 0 ends at 0, not at the configured peak"


def test_units_paths_and_grammar():
    assert bytes_pair(int(2.61 * 2**30), int(23.5 * 2**30)) == "2.61 / 23.5 GiB"
    assert bytes_pair(975 << 20, int(23.5 * 2**30)) == "975 MiB / 23.5 GiB"
    text = "checkpoint written: runs/some-long-run-name/checkpoints/step-000123.safetensors (1.2 GiB)"
    short = middle_ellipsis(text, 60)
    assert (len(short) <= 60 and short.startswith("checkpoint written: runs/")
            and short.endswith(".safetensors (1.2 GiB)"))
    assert "…" in short


@pytest.mark.parametrize("command", [["attach", "--theme", "bogus"], ["train", "--headless", "--theme", "bogus"]])
def test_a_bad_theme_is_refused_with_the_allowed_ones(command, capsys):
    from tui.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(command)
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1
    assert "--theme" in err and "allowed: dark, light, high-contrast, ansi" in err


@pilot_test
async def test_the_log_wraps_again_when_the_terminal_is_resized():
    app, _ = make()
    async with opened(app, (80, 24)) as pilot:
        log = app.dashboard.query_one("#log")
        app.model.note("warning", "a long warning " * 12)  # 180 characters: three rows at 80 columns
        app.redraw()
        await wait_for(pilot, lambda: any("a long warning" in line for line in log.plain), "the warning logged")
        narrow = max(len(strip.text.rstrip()) for strip in log.lines)
        await pilot.resize_terminal(160, 40)
        await wait_for(pilot, lambda: max(len(strip.text.rstrip()) for strip in log.lines) > narrow + 40,
                       "lines wrapped at the new width")
        rows = [strip.text for strip in log.lines if "a long warning" in strip.text]
        assert len(rows) == 2, rows  # 180 characters in two rows of ~150, not three of ~70 any more


@pilot_test
async def test_a_long_runs_log_keeps_its_newest_lines_with_the_step_column_as_wide_as_the_run():
    """10,000 evals of a 100M-step run arrive at once: the newest LOG_LINES are written (the widget keeps no
    more), and a 9-digit step keeps every row's bar in one column, wrapped rows too."""
    from tui.widgets.log import LOG_LINES

    total = 100_000_000
    evals = [ev.EvalDone(t=float(i), step=(i + 1) * 10_000, val_loss=1.0 / (i + 1), seconds=0.4)
             for i in range(10_000)]
    session = ScriptedSession(history=[ev.RunStarted(t=0.0, name="long", total_steps=total), *evals,
                                       ev.Warning(t=1e4, text="a long warning " * 12, step=total),
                                       ev.StepLogged(t=1e4, step=total, loss=0.1)])
    app, _ = make(session)
    async with opened(app, (100, 30), steps=total) as pilot:
        log = app.dashboard.query_one("#log")
        await wait_for(pilot, lambda: any("a long warning" in line for line in log.plain), "the history logged")
        assert len(log.plain) == LOG_LINES and len(log.lines) == LOG_LINES
        assert log.plain[0].startswith(f"{(10_002 - LOG_LINES) * 10_000:>9} │ eval")
        rows = [strip.text for strip in log.lines]
        assert {row.index("│") for row in rows} == {10}, "one column for 9-digit steps and continuation rows"
        first = next(i for i, row in enumerate(rows) if "a long warning" in row)
        assert rows[first].startswith(f"{total} │ a long warning") and rows[-1].startswith(" " * 10 + "│ ")


@pilot_test
async def test_the_footer_shows_what_acts_at_each_width_and_q_says_detach():
    session = ScriptedSession(history=demo_run(300), detachable=True, run_dir="runs/demo-run")
    app, _ = make(session)
    async with opened(app, (80, 24)) as pilot:
        await wait_for(pilot, lambda: "detach" in _footer(app), "q detach in the footer")
        narrow = _footer(app)
        assert "chart" in narrow and "stop" in narrow and not {"log-y", "compare", "procs", "abort"} & set(narrow)
        await pilot.resize_terminal(160, 45)
        await wait_for(pilot, lambda: "palette" in _footer(app), "^p at 160 columns")
        wide = _footer(app)
        assert {"log-y", "compare", "procs", "abort", "detach"} <= set(wide) and "chart" not in wide


@pilot_test
async def test_a_panels_step_row_update_repaints_every_row_when_the_row_count_changed():
    """The progress tick repaints the step row alone, the rows below wait for the text redraw; but when the
    rows below are packed into another count (a rate a digit longer), the step row must not wait a second
    with them (the soak's lag reached 1.18 s): every row is repainted then."""
    from types import SimpleNamespace

    from textual.app import App
    from textual.widgets import Static

    from tui.widgets.panel import TextPanel

    class Lines(TextPanel):
        area = "progress"

        def content(self, model) -> str:
            return "\n".join(model.shown)

    class Host(App):
        def compose(self):
            yield Lines()

    model = SimpleNamespace(versions={"progress": 0}, shown=["step 1", "a b c"])
    async with Host().run_test() as pilot:
        panel = pilot.app.query_one(Lines)
        assert panel.update_from(model)
        model.shown, model.versions["progress"] = ["step 2", "a b d"], 1
        assert panel.update_from(model, rows=1) and panel.text == "step 2\na b c"  # the row below waits
        model.shown, model.versions["progress"] = ["step 3", "a b", "d"], 2
        assert panel.update_from(model, rows=1) and panel.text == "step 3\na b\nd"  # another row count: all now
        await pilot.pause()
        assert len(panel.query_children(Static)) == 3
        assert not panel.update_from(model)  # seen: the full update has nothing left to do
