"""The README's screenshots: the task snapshots at 120×40 and the `plot` snapshot, copied into docs/screenshots/.

``python -m tests.tui.screenshots`` after ``pytest tests/tui/test_task_screens.py --snapshot-update``; the
suite fails while a copy differs from its snapshot (tests/tui/test_task_screens.py), so the README never shows
an older dashboard than the one the tests check. The pictures are Textual's own SVG screenshots.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import ROOT
from tests.tui.screens import FIXTURES, RUNS

SCREENSHOTS = ROOT / "docs" / "screenshots"
SNAPSHOTS = ROOT / "tests" / "tui" / "__snapshots__" / "test_task_screens"
#: docs/screenshots/<name> ← (snapshot test, its parameters).
PICTURES = {**{f"dashboard-{task}.svg": ("test_dashboard", f"{task}-120x40") for task in RUNS},
            "plot.svg": ("test_plot", None)}


def snapshot_path(test: str, param: str | None) -> Path:
    """Where pytest-textual-snapshot keeps a snapshot."""
    return SNAPSHOTS / (f"{test}[{param}].svg" if param else f"{test}.svg")


def plot_app(directory: Path):
    """A one-widget app showing `sensorlm-tui plot` of the recorded gapfill run, in colour, as a terminal shows it."""
    from rich.text import Text
    from textual.app import App
    from textual.widgets import Static

    from tui.commands.plot import render

    run = directory / "runs" / RUNS["gapfill"]
    run.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(FIXTURES / f"{RUNS['gapfill']}.jsonl", run / "events.jsonl")
    chart = render([run], width=98, height=26, colour=True)

    class PlotApp(App):
        CSS = "Screen { background: black; } Static { color: white; }"

        def compose(self):
            yield Static(f"$ sensorlm-tui plot runs/{RUNS['gapfill']}")
            yield Static(Text.from_ansi(chart))

    return PlotApp()


def main() -> int:
    """Copy each snapshot to docs/screenshots/ (prints what it copied)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for picture, (test, param) in PICTURES.items():
        source = snapshot_path(test, param)
        if not source.is_file():
            raise SystemExit(f"{source}: missing; run `pytest tests/tui/test_task_screens.py --snapshot-update`")
        shutil.copyfile(source, SCREENSHOTS / picture)
        print(f"{SCREENSHOTS / picture} ← {source.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
