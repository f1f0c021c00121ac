"""Recorded runs of each task, replayed into the dashboard: what the task snapshots and the README show.

``tests/fixtures/screens/<run>.jsonl`` are real events.jsonl files of short headless runs (the commands are
in tests/fixtures/README.md); replayed through a ScriptedSession they draw each task's real curves,
metrics and memory deterministically, since every number and timestamp comes from the file.
"""

from __future__ import annotations

from pathlib import Path

from engine.run import events as ev
from tests.conftest import ROOT
from tui.dashboard.app import DashboardApp
from tui.dashboard.scripted import ScriptedSession

FIXTURES = ROOT / "tests" / "fixtures" / "screens"
#: The recorded run per task shown in the snapshots and the README.
RUNS = {"sensorlm": "sensorlm-demo", "lm": "lm-tiny", "gapfill": "gapfill-demo"}
#: Replay up to this step (of 240): a run in progress, with a rate and an ETA.
UNTIL_STEP = 200
SIZES = [(80, 24), (100, 30), (120, 40)]


def recorded(run: str, until_step: int = UNTIL_STEP) -> list[ev.Event]:
    """The recorded events of ``run`` up to the first step after ``until_step`` (that step's eval, checkpoint,
    samples and state changes included: the run is mid-flight, training)."""
    events = [e for e in map(ev.from_json, (FIXTURES / f"{run}.jsonl").read_text().splitlines()) if e]
    cut = next((i for i, e in enumerate(events) if isinstance(e, ev.StepLogged) and e.step > until_step), len(events))
    return [e for e in events[:cut] if not isinstance(e, ev.RunFinished)]


def task_app(task: str) -> DashboardApp:
    """A dashboard over the recorded run of ``task``, as `attach` would show it mid-run."""
    session = ScriptedSession(history=recorded(RUNS[task]), detachable=True, run_dir=Path("runs") / RUNS[task])
    return DashboardApp(lambda: session)


def screen_text(app: DashboardApp) -> list[str]:
    """What the terminal shows now, one string per row (Textual's compositor, as the snapshot renders it)."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


#: The dashboard regions whose numbers must never be cut off at the edge ("…"): the title, the chart titles
#: (with the guides' values), the progress and memory panels.
WHOLE = ("header-title", "chart-1-title", "chart-2-title", "progress", "memory")


def cut_rows(app: DashboardApp) -> list[str]:
    """Rows of the WHOLE regions that end in "…" (cut at the edge), as "region: row"."""
    lines = screen_text(app)
    out = []
    for name in WHOLE:
        widget = app.dashboard.query_one(f"#{name}")
        if not widget.display or not widget.parent.display:
            continue
        region = widget.region
        for y in range(region.y, min(region.bottom, len(lines))):
            row = lines[y][region.x:region.right].strip(" │╭╮╰╯─")
            if row.endswith("…"):
                out.append(f"{name}: {row}")
    return out


async def settle(pilot) -> None:
    """The recorded history on screen, every panel drawn at the terminal's size, the log at its end."""
    from tests.tui.tui_helpers import wait_for

    app = pilot.app
    await wait_for(pilot, lambda: app.model.step > 0 and app.session is not None, "history loaded")
    for _ in range(2):  # the second pass draws with the sizes the first layout settled
        app.redraw(force=True)
        await pilot.pause(0.1)
    log = app.dashboard.query_one("#log")
    await wait_for(pilot, lambda: len(log.lines) >= len(log.plain) > 0, "log lines rendered")
    log.scroll_end(animate=False)
    await wait_for(pilot, lambda: log.scroll_offset.y == log.max_scroll_y, "log scrolled to its end")
    await pilot.pause(0.1)
