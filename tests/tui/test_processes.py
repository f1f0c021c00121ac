"""The process view's table: the run's tree from the engine's pid, each process's role, CPU %, memory, state."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.tui.tui_helpers import make, on_screen, opened, pilot_test, wait_for
from tui.model.processes import ProcessTable, role_of
from tui.screens.processes import table_text

_PARENT = ("import subprocess, sys, time; "
           "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)")


def test_the_table_lists_the_engine_and_its_children_with_their_numbers() -> None:
    parent = subprocess.Popen([sys.executable, "-c", _PARENT])
    try:
        table = ProcessTable(parent.pid)
        deadline = time.monotonic() + 20
        rows = table.rows()
        while len(rows) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
            rows = table.rows()
        assert [(r.depth, r.pid == parent.pid) for r in rows] == [(0, True), (1, False)]
        assert rows[0].role == "engine", "the pid the viewer was given is the engine, whatever its command line"
        assert rows[0].cpu_percent is not None and all(r.rss > 1 << 20 and r.state for r in rows)
        text = table_text(table.rows())
        assert text.splitlines()[0].startswith("[b]process") and str(parent.pid) in text
    finally:
        parent.kill()
        parent.wait()
    assert ProcessTable(parent.pid).rows() == [], "a process that is gone lists nothing"


def test_roles_come_from_the_command_line() -> None:
    assert role_of(["python", "-m", "engine", "--task", "toy"]) == "engine"
    assert role_of(["python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()"]) == "data worker"
    assert role_of(["python", "-m", "engine.app.rank_worker"], {"RANK": "1"}) == "rank 1"
    assert role_of(["python", "-m", "engine.app.supervisor"]) == "supervisor"


@pilot_test
async def test_p_opens_the_process_view() -> None:
    app, _ = make()
    async with opened(app, (120, 40)) as pilot:
        await wait_for(pilot, lambda: "procs" in [k.description for k in app.dashboard.query("FooterKey")],
                       "p in the footer at 120 columns")
        await pilot.press("p")
        await on_screen(pilot, "ProcessScreen")
        assert app.screen.table.pid == 4242, "the engine's pid from its RunStarted"
        table = app.screen.query_one("#processes-table")
        await wait_for(pilot, lambda: str(table.render()).strip(), "the table drawn")
        await pilot.press("escape")
        await on_screen(pilot, "DashboardScreen")
