"""Attaching to a run whose process is gone: the dashboard says how it ended, in the words `runs` uses, and offers
to resume only what the engine can resume (a user's own script is resumed by their command)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from engine.run import events as ev
from engine.run.control.client import RunClient
from tests.tui.screens import screen_text
from tests.tui.tui_helpers import pilot_test, wait_for
from tui.dashboard.attach_app import AttachApp

#: The command a user's script recorded as what resumes it (engine.app.integrations).
SCRIPT = "python train.py --resume"


def _run(root: Path, name: str, config: dict, *, steps: int, status: dict) -> Path:
    """A run directory as its writer left it: ``steps`` steps of a ``total``-step run, and its last status."""
    run = root / name
    run.mkdir(parents=True)
    events = [ev.Schema(t=1.0), ev.RunStarted(t=2.0, name=name, task="toy", config=config, total_steps=300, pid=99)]
    events += [ev.StepLogged(t=2.0 + i, step=i, loss=1.0 / i, steps_per_s=1.0, samples_per_s=16.0, batch_size=16)
               for i in range(1, steps + 1)]
    if status.get("state") == "aborted":
        events += [ev.StateChanged(t=50.0, state="aborted", step=steps),
                   ev.RunFinished(t=50.0, status="aborted", steps=steps, exit_code=0)]
    (run / "events.jsonl").write_text("".join(ev.to_json(e) + "\n" for e in events))
    (run / "status.json").write_text(json.dumps({"pid": 2 ** 22 + 12345, "host": socket.gethostname(),
                                                 "heartbeat": 1.0, "step": steps, **status}))
    return run


def _footer(app) -> list[str]:
    return screen_text(app)[-1].split()


async def _opened(app: AttachApp, pilot, liveness: str) -> None:
    await wait_for(pilot, lambda: app.model.liveness == liveness and app.model.step > 0, f"the run {liveness}")
    app.redraw(force=True)
    await pilot.pause(0.2)


@pilot_test
async def test_a_killed_script_reads_crashed_and_is_not_offered_for_resume_here(tmp_path):
    integration = {"integration": {"framework": "loop", "command": SCRIPT}}
    run = _run(tmp_path, "mine", integration, steps=42, status={"state": "running", "resume_command": SCRIPT})
    app = AttachApp(lambda: RunClient(run), run)
    async with app.run_test(size=(120, 40)) as pilot:
        await _opened(app, pilot, "crashed")
        header = screen_text(app)[0]
        assert "CRASHED" in header and "FAILED" not in header, header
        await wait_for(pilot, lambda: "resume it with your own command" in app.status_text, "what resumes it")
        assert app.status_text == f"crashed at step 42; resume it with your own command: {SCRIPT}"
        log = " ".join(app.dashboard.query_one("#log").plain)
        assert "crashed: your script's process is gone without finishing" in log and "engine crashed" not in log
        assert "resume" not in _footer(app) and len(app.screen_stack) == 1, "nothing the engine could resume"
        await pilot.press("r")
        assert app.status_text == f"resume: this run is your own script's; run {SCRIPT}"
        assert len(app.screen_stack) == 1
    engine = _run(tmp_path, "engine", {"train": {"batch_size": 16}}, steps=42, status={"state": "running"})
    app = AttachApp(lambda: RunClient(engine), engine)
    async with app.run_test(size=(120, 40)) as pilot:
        await _opened(app, pilot, "crashed")
        await wait_for(pilot, lambda: len(app.screen_stack) == 2, "the resume offer for the engine's run")
        await pilot.press("escape")
        await wait_for(pilot, lambda: "resume" in _footer(app), "r resume in the footer")
        assert "crashed: the engine's process is gone without finishing" in " ".join(
            app.dashboard.query_one("#log").plain)


@pilot_test
async def test_an_aborted_run_shows_how_it_ended_not_an_eta(tmp_path):
    run = _run(tmp_path, "stopped", {"train": {"batch_size": 16}}, steps=42, status={"state": "aborted"})
    app = AttachApp(lambda: RunClient(run), run, read_only=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await _opened(app, pilot, "aborted")
        progress = "\n".join(screen_text(app))
        assert "step 42/300" in progress and "aborted" in progress.split("step 42/300")[1].split("╰")[0]
        assert "ETA" not in progress and "done" not in progress
