"""Each task's dashboard at 80×24, 100×30 and 120×40 (recorded runs, tests/tui/screens.py): a snapshot of each,
no number that matters cut off at any of them, and the README's screenshots are these pictures.

Regenerate after an intended change with ``pytest tests/tui/test_task_screens.py --snapshot-update``, look at
the report, then ``python -m tests.tui.screenshots`` copies the 120×40 pictures into docs/screenshots/.
"""

from __future__ import annotations

import pytest

from tests.tui.screens import RUNS, SIZES, cut_rows, settle, task_app
from tests.tui.screenshots import PICTURES, SCREENSHOTS, plot_app, snapshot_path


def _checked(seen: dict, key: tuple):
    async def run_before(pilot) -> None:
        await settle(pilot)
        seen[key] = cut_rows(pilot.app)
    return run_before


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
@pytest.mark.parametrize("task", list(RUNS))
def test_dashboard(snap_compare, task, size):
    seen: dict = {}
    assert snap_compare(task_app(task), terminal_size=size, run_before=_checked(seen, (task, size)))
    assert seen[(task, size)] == [], f"cut off at {size}: {seen[(task, size)]}"


def test_plot(snap_compare, tmp_path):
    assert snap_compare(plot_app(tmp_path), terminal_size=(100, 28))


def test_the_readme_screenshots_are_the_snapshots():
    for picture, (test, param) in PICTURES.items():
        source = snapshot_path(test, param)
        assert source.is_file(), f"{source}: run the snapshot tests first"
        copied = SCREENSHOTS / picture
        assert copied.is_file() and copied.read_bytes() == source.read_bytes(), \
            f"{copied} is stale: run `python -m tests.tui.screenshots`"
