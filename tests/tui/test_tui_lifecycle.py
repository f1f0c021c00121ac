"""Dashboard lifecycle: first frame before the session, hang-up, a broken panel, a finished run, a failed open."""

from __future__ import annotations

import os
import signal
import threading

from engine.core.invocation import program
from engine.run import events as ev
from tests.tui.tui_helpers import loaded, make, pilot_test, wait_for
from tui.dashboard.app import DashboardApp
from tui.dashboard.scripted import ScriptedSession, demo_run


@pilot_test
async def test_the_factory_runs_on_a_worker_after_the_first_frame():
    release = threading.Event()
    seen: list = []
    session = ScriptedSession(history=demo_run(20))

    def slow_factory():  # as an in-process session importing torch would be
        seen.append(threading.current_thread() is threading.main_thread())
        release.wait(5)
        return session

    app = DashboardApp(slow_factory)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: seen, "factory called")
        header = app.dashboard.query_one("#header-badge")
        assert "CONNECTING" in str(header.render()), "the dashboard is up while the session is still opening"
        app.redraw(force=True)
        assert "waiting for the first step…" in str(app.dashboard.query_one("#chart-1").render())
        release.set()
        await loaded(pilot, app, steps=20)
    assert seen == [False]


@pilot_test
async def test_sighup_detaches_and_closes_the_session():
    session = ScriptedSession(history=demo_run(50), detachable=True, run_dir="runs/demo-run")
    app, _ = make(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app, steps=50)
        os.kill(os.getpid(), signal.SIGHUP)
        await wait_for(pilot, lambda: app.return_code is not None, "exit on hang-up")
    await_closed = session.closed.wait(5)
    assert await_closed and session.sent == []
    assert "terminal hung up" in app.summary and f"{program()} attach runs/demo-run" in app.summary


@pilot_test
async def test_a_failing_panel_is_reported_and_the_session_lives_on():
    app, session = make(ScriptedSession(history=demo_run(50), interval=0.01,
                                        events=[ev.StepLogged(step=s, loss=1.0) for s in range(51, 80)]))
    async with app.run_test(size=(120, 40)) as pilot:
        panel = app.dashboard.query_one("#system")

        def broken(model, force=False):
            raise RuntimeError("boom")

        panel.update_from = broken
        await wait_for(pilot, lambda: "panel system failed (RuntimeError: boom)" in app.status_text, "error shown")
        await wait_for(pilot, lambda: app.model.step == 79, "events still flowing")
        assert not session.closed.is_set() and app.return_code is None
        await pilot.press("space")
        await wait_for(pilot, lambda: app.model.state == "paused", "controls still work")


@pilot_test
async def test_a_finished_run_stays_on_screen_until_quit():
    app, session = make(ScriptedSession(history=demo_run(100, finished=True), liveness="finished"))
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app, steps=100)
        await wait_for(pilot, lambda: app.status_text.endswith("— q quits"), "finished notice")
        assert app.return_code is None
        await pilot.press("space")
        assert "the run has ended" in app.status_text
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_code is not None, "exit")
    assert app.return_code == 0 and session.sent == []
    assert app.summary.startswith("demo-run: finished at step 100")


@pilot_test
async def test_a_session_that_cannot_open_exits_1_with_the_reason():
    def factory():
        raise FileNotFoundError("runs/nope: not a run directory")

    app = DashboardApp(factory)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.return_code is not None, "exit")
    assert app.return_code == 1 and app.summary_is_error
    assert app.summary == "sensorlm-tui: error: FileNotFoundError: runs/nope: not a run directory"


@pilot_test
async def test_q_while_connecting_leaves_at_once():
    release = threading.Event()

    def slow_factory():
        release.wait(5)
        return ScriptedSession(history=demo_run(10))

    app = DashboardApp(slow_factory)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_code is not None, "exit on q")
        release.set()
    assert app.return_code == 0 and app.summary == "", "nothing was started: nothing to say"


class _Launching:
    """A session factory that launches an engine: pid 4242, one phase, then it waits to be stopped or left."""

    def __init__(self) -> None:
        self.outcome = None

    def open(self, watch):
        from engine.run.control.launcher import LaunchCancelled, LaunchError

        watch.spawned(4242, "runs/x")
        watch.phase(ev.PhaseStarted(phase="importing torch"))
        for _ in range(500):
            if watch.cancelled():
                self.outcome = "stopped"
                raise LaunchCancelled("stopped the engine while importing torch (exit 130): nothing was trained; "
                                      "runs/x", exit_code=130)
            if watch.abandoned():
                self.outcome = "left starting"
                raise LaunchError("stopped waiting for the engine (pid 4242)")
            threading.Event().wait(0.01)
        raise AssertionError("never stopped nor left")


@pilot_test
async def test_q_while_the_engine_starts_detaches_naming_its_phase_pid_and_how_to_stop_it():
    factory = _Launching()
    app = DashboardApp(factory)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.model.starting_up, "the phase heard live")
        app.redraw(force=True)
        assert "importing torch" in str(app.dashboard.query_one("#chart-1").render())
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_code is not None, "exit on q")
    assert app.return_code == 0
    assert app.summary == ("detached while the engine starts (importing torch · pid 4242); it keeps starting, then "
                           f"trains. Attach: {program()} attach runs/x · stop: kill -INT 4242 (it checkpoints first)")
    assert app.wait_closed(5) and factory.outcome == "left starting"


@pilot_test
async def test_ctrl_c_while_the_engine_starts_stops_it_with_one_line_and_130():
    factory = _Launching()
    app = DashboardApp(factory)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.model.starting_up, "the phase heard live")
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: app.return_code is not None, "exit once the engine stopped")
    assert factory.outcome == "stopped"
    assert app.return_code == 130 and not app.summary_is_error
    assert app.summary == "x: stopped the engine while importing torch (exit 130): nothing was trained; runs/x"
