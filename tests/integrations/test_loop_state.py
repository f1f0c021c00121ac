"""The plain loop's saved state as safe as the engine's checkpoints, and its directory its own.

- a damaged ``last.pt`` falls back to ``last.prev.pt`` (and is never rotated over it);
- a kill -9 in the middle of saves, ten times, leaves no temporary file behind (processes forked from the
  preloaded server: a kill a second, not an interpreter start each);
- a real engine run's directory is refused in one line, nothing in it changed.
(The hostile corpus's ``integration`` section has the refusals: a FIFO, /dev/zero, a truncated file, a pickle
that would run code, another model, another run's directory, ``train --resume`` of a loop run.)
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import torch

from sensorlm_tui.loop import CockpitError, cockpit
from tests.conftest import read_events
from tests.engine.reliability.test_hostile import _tree_digest
from tests.integrations.user_loop import build


@pytest.fixture(scope="module")
def server(forks):
    """The session's preloaded fork server (tests/conftest.py)."""
    return forks


def _steps(run_dir: Path, steps: int, save_every: int, check=None) -> None:
    """The user's loop in this process; ``check(step)`` after each step."""
    model, optimizer = build()
    with cockpit(run_dir, model=model, optimizer=optimizer, total_steps=steps, save_every=save_every) as run:
        for step in range(run.start_step, steps):
            loss = model(torch.randn(8, 16)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            run.step(loss=loss)
            if check is not None:
                check(step + 1)


def _saved_step(path: Path) -> int:
    return torch.load(path, weights_only=True)["step"]


def test_a_damaged_last_pt_falls_back_to_the_previous_good_one_and_is_never_rotated_over_it(tmp_path) -> None:
    run = tmp_path / "run"
    _steps(run, 4, 2)
    checkpoints = run / "checkpoints"
    assert (_saved_step(checkpoints / "last.pt"), _saved_step(checkpoints / "last.prev.pt")) == (4, 2)
    last = checkpoints / "last.pt"
    last.write_bytes(last.read_bytes()[:100])  # damaged (a bad disk, a copy cut short)
    seen = {}

    def check(step: int) -> None:
        if step == 4:  # the first save after the fallback: the damaged file replaced, the good one kept
            seen[step] = (_saved_step(checkpoints / "last.pt"), _saved_step(checkpoints / "last.prev.pt"))

    _steps(run, 6, 2, check)
    events = read_events(run)
    resumed = [e for e in events if e["type"] == "run_started"][-1]
    assert resumed["start_step"] == 2 and resumed["resumed_from"] == str(checkpoints / "last.prev.pt")
    warned = [e["text"] for e in events if e["type"] == "warning" and e["text"].startswith("resume:")]
    assert len(warned) == 1 and f"{last}: not a readable checkpoint" in warned[0], warned
    assert seen[4] == (4, 2)
    assert (_saved_step(checkpoints / "last.pt"), _saved_step(checkpoints / "last.prev.pt")) == (6, 4)


@pytest.mark.slow
def test_an_integration_on_an_engine_run_directory_is_refused_in_one_line_and_changes_nothing(server, tmp_path) -> None:
    engine_run = tmp_path / "engine-run"
    trained = server.spawn(["--task", "toy", "--threads", "1", "--max-steps", "2", "--run-dir", str(engine_run)],
                           tmp_path / "io")
    assert trained.wait(120) == 0, trained.err.read_text()[-2000:]
    before = _tree_digest(engine_run)
    with pytest.raises(CockpitError) as refused:
        _steps(engine_run, 4, 2)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{engine_run}: holds an engine run of task 'toy'"), message
    assert _tree_digest(engine_run) == before


KILLS = 10


def _committed_since(path: Path, since: float) -> bool:
    """True when ``path`` was (re)written at or after ``since`` (epoch seconds)."""
    try:
        return path.stat().st_mtime >= since
    except FileNotFoundError:
        return False


def _until(condition, server, loop, what: str, timeout: float = 60) -> None:
    """Poll ``condition`` every 2 ms while the loop lives; fail after ``timeout`` s or if it exited."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline and server.wait(loop.pid, 0) is None, \
            f"no {what}\n{loop.err.read_text()[-2000:]}"
        time.sleep(0.002)


@pytest.mark.slow
def test_ten_kills_in_the_middle_of_saves_leave_no_temporary_file(server, tmp_path) -> None:
    """A wide model (each save ~15 MB) saved every step: each kill lands while a ``.last.pt.tmp-<pid>`` is being
    written, which the test sees before it kills. The next start removes the dead writer's file."""
    run = tmp_path / "run"
    checkpoints = run / "checkpoints"
    args = [str(run), "--steps", "100000", "--save-every", "1", "--width", "65536"]
    landed = 0
    for kill in range(KILLS):
        started = time.time()
        loop = server.spawn(args, tmp_path / "io", entry="loop")
        temporary = f".last.pt.tmp-{loop.pid}"
        _until(lambda t=started: _committed_since(checkpoints / "last.pt", t), server, loop,
               f"kill {kill}: a save of this process committed")  # so the run always has a good last.pt
        _until(lambda name=temporary: any(checkpoints.glob(name)), server, loop, f"kill {kill}: its next save")
        loop.signal(signal.SIGKILL)
        assert loop.wait(30) == -signal.SIGKILL
        landed += any(checkpoints.glob(f".last.pt.tmp-{loop.pid}"))  # still there: killed mid-write
        left = sorted(p.name for p in checkpoints.glob(".last.pt.tmp-*"))
        assert len(left) <= 1, f"kill {kill}: temporary files of earlier kills were not removed: {left}"
    assert landed >= KILLS // 2, f"only {landed} of {KILLS} kills landed mid-save"
    final = server.spawn([str(run), "--steps", "0", "--save-every", "1", "--width", "65536"], tmp_path / "io",
                         entry="loop")
    assert final.wait(60) == 0, final.err.read_text()[-2000:]
    assert not list(checkpoints.glob(".last.pt.tmp-*"))
    assert _saved_step(checkpoints / "last.pt") >= 1 and os.path.getsize(checkpoints / "last.pt") > 10 << 20


def test_a_fresh_rerun_killed_at_step_43_is_listed_with_its_own_step_best_and_ending(server, tmp_path) -> None:
    """An older process finished at step 91 with a best; a fresh rerun into the same directory (no saved state:
    step 0) is killed at step 43. `runs` must show the rerun's facts, not the older process's."""
    from tui.model.run_index import summarize

    run = tmp_path / "run"
    older = server.spawn([str(run), "--steps", "91", "--save-every", "0", "--eval", "val_loss=0.5"], tmp_path / "io",
                         entry="loop")
    assert older.wait(120) == 0, older.err.read_text()[-2000:]
    assert summarize(run).finished_as == "finished" and summarize(run).best == 0.5
    rerun = server.spawn([str(run), "--steps", "860", "--save-every", "0", "--kill-at", "43"], tmp_path / "io",
                         entry="loop")
    assert rerun.wait(120) == -signal.SIGKILL, rerun.err.read_text()[-2000:]
    listed = summarize(run)
    assert (listed.step, listed.total_steps, listed.best, listed.finished_as) == (43, 860, None, None), listed
    assert (listed.state, listed.pid) == ("crashed", rerun.pid)
    status = json.loads((run / "status.json").read_text())
    assert status["pid"] == rerun.pid and "best" not in status and status["step"] == 43
