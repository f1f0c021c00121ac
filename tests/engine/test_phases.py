"""Start-up phases: the engine tells each as it begins, before its run directory exists, to every viewer;
and a stop while it starts ends it there, one line, exit 130, nothing trained, nothing left running."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from engine.app.main import run_prepared
from engine.app.prepare import prepare
from engine.core.cli_args import OneLineParser, add_train_arguments
from engine.run import events as ev
from engine.run.control.launcher import LaunchCancelled, LaunchWatch, launch
from engine.run.control.requests import Controls
from engine.run.sinks import ConsoleSink

STARTUP = ["importing torch", "predicting memory", "building data and model"]


def _prepared(run_dir: Path, *flags: str):
    parser = OneLineParser(prog="t")
    add_train_arguments(parser)
    return prepare(parser.parse_args(["--task", "toy", "--threads", "1", "--max-steps", "2",
                                      "--run-dir", str(run_dir), *flags]))


class _Console(io.StringIO):
    """A console that notes, per line, whether the event log existed when the line was written."""

    def __init__(self, events: Path) -> None:
        super().__init__()
        self.events, self.lines = events, []

    def write(self, text: str) -> int:
        self.lines.append((text, self.events.exists()))
        return super().write(text)


@pytest.fixture(scope="module")
def told(tmp_path_factory):
    """One toy run (2 steps) with a live sink and a console, each noting what existed when a phase arrived."""
    run_dir = tmp_path_factory.mktemp("phases") / "r"
    live: list[tuple[ev.Event, bool]] = []
    console = _Console(run_dir / "events.jsonl")
    import sys

    saved, sys.stdout = sys.stdout, console
    try:
        code = run_prepared(_prepared(run_dir), console=True, install_signals=False, serve_controls=False,
                            extra_sinks=[lambda e: live.append((e, (run_dir / "events.jsonl").exists()))])
    finally:
        sys.stdout = saved
    return code, run_dir, live, console.lines


def test_phases_reach_the_log_in_order_before_the_first_step(told) -> None:
    code, run_dir, _, _ = told
    assert code == 0
    events = [e for e in map(ev.from_json, (run_dir / "events.jsonl").read_text().splitlines()) if e]
    types = [e.type for e in events]
    phases = [e for e in events if e.type == "phase"]
    assert [p.phase for p in phases] == [*STARTUP, "first evaluation, first step"]
    assert all(a.t <= b.t for a, b in zip(phases, phases[1:])), "stamped when each began"
    assert types.index("phase") < types.index("run_started") < types.index("step")
    assert phases[2].detail.startswith("toy/")
    assert not (run_dir / "startup.jsonl").exists()


def test_a_live_viewer_hears_each_phase_before_the_run_directory_exists(told) -> None:
    _, _, live, _ = told
    early = [e.phase for e, log_existed in live if e.type == "phase" and not log_existed]
    assert early == STARTUP, "in-process viewers heard them as they began, not when the log opened"
    assert [e.phase for e, _ in live if e.type == "phase"].count("importing torch") == 1, "told once"


def test_headless_prints_each_phase_at_once_and_the_model_summary(told) -> None:
    _, _, _, lines = told
    early = [text for text, log_existed in lines if text.startswith("phase ") and not log_existed]
    assert [line.split(" elapsed")[0] for line in early] == ["phase importing torch", "phase predicting memory",
                                                             "phase building data and model (toy/demo)"]
    start = next(text for text, _ in lines if text.startswith("start "))
    assert " trainable " in start and " precision fp32 " in start and " data " in start and " val samples" in start
    assert sum(text.startswith("phase importing torch") for text, _ in lines) == 1, "printed once"


def test_an_in_process_stop_while_starting_ends_at_the_next_phase(tmp_path: Path) -> None:
    controls, live = Controls(), []

    def sink(event) -> None:
        live.append(event)
        if event.type == "phase" and event.phase == "importing torch":
            controls.request_graceful("viewer: Ctrl-C", 130)

    code = run_prepared(_prepared(tmp_path / "r"), console=False, install_signals=False, serve_controls=False,
                        controls=controls, extra_sinks=[sink])
    assert code == 130
    assert [e.phase for e in live if e.type == "phase"] == ["importing torch"]
    finished = live[-1]
    assert finished.type == "run_finished" and finished.status == "interrupted" and finished.exit_code == 130
    assert finished.reason == "stopped while importing torch: nothing was trained"
    assert not (tmp_path / "r").exists(), "nothing written"


def test_a_launched_engine_tells_its_phases_and_a_cancel_stops_it(tmp_path: Path) -> None:
    class Watch(LaunchWatch):
        def __init__(self) -> None:
            self.pid, self.phases = None, []

        def spawned(self, pid: int, run_dir: Path) -> None:
            self.pid = pid

        def phase(self, event) -> None:
            self.phases.append(event.phase)

        def cancelled(self) -> bool:  # Ctrl-C in the dashboard once the engine imports torch
            return "importing torch" in self.phases

    watch, run_dir = Watch(), tmp_path / "r"
    with pytest.raises(LaunchCancelled) as info:
        launch(["--task", "toy", "--threads", "1", "--max-steps", "5"], run_dir, timeout=120, watch=watch)
    assert watch.pid and watch.phases == ["reading the config", "importing torch"]
    assert info.value.exit_code == 130
    assert str(info.value).startswith("stopped the engine while importing torch (exit 130): nothing was trained")
    # nothing but the log and the lock the launcher makes first (what a fresh run accepts as a start-up's leftovers)
    assert sorted(p.name for p in run_dir.iterdir()) == ["engine.lock", "engine.log"], "nothing but the log"
    log = (run_dir / "engine.log").read_text()
    assert log.splitlines()[-1].startswith("done  interrupted at step 0 stopped while importing torch: nothing was "
                                           "trained"), log
    assert "Traceback" not in log


def test_the_console_prints_a_phase_with_its_detail() -> None:
    out = io.StringIO()
    ConsoleSink(out)(ev.PhaseStarted(phase="building data and model", detail="lm/tiny", t=0.0))
    assert out.getvalue().startswith("phase building data and model (lm/tiny) elapsed 0:00 at ")


@pytest.mark.slow
def test_headless_prints_reading_the_config_first_and_logs_it(tmp_path: Path) -> None:
    """The dashboard showed "reading the config" from the process's first instant; headless skipped it. Once the
    flags are parsed (--help and a bad flag print no phase) it is the first line, and the run's log holds it."""
    from tests.conftest import run_cli

    run = tmp_path / "run"
    result = run_cli("train", "--headless", "--task", "toy", "--threads", "1", "--max-steps", "2",
                     "--run-dir", str(run))
    assert result.returncode == 0, result.stderr
    phases = [line.split(" elapsed")[0] for line in result.stdout.splitlines() if line.startswith("phase ")]
    assert phases[:2] == ["phase reading the config", "phase importing torch"]
    assert result.stdout.startswith("phase reading the config elapsed 0:00 at ")
    logged = [e.phase for e in map(ev.from_json, (run / "events.jsonl").read_text().splitlines())
              if e is not None and e.type == "phase"]
    assert logged == ["reading the config", *STARTUP, "first evaluation, first step"]
    for argv in (["train", "--help"], ["train", "--batch-size", "x"]):
        assert "phase" not in run_cli(*argv).stdout
    assert "phase" not in run_cli("--help", module="engine").stdout
