"""The transformers callback's checkpoints and resume: checkpoint-now while paused, absolute paths and real save
times, and a resume that says where it came from and is measured at once.

Two processes of examples/integrations/hf_run.py (a tiny random Llama on CPU), shared by the tests: the first
is paused, asked twice for a checkpoint while paused, resumed and gracefully aborted; the second continues
from the newest ``checkpoint-N`` (``resume_from_checkpoint=True``).
"""

from __future__ import annotations

import time
from importlib.util import find_spec
from pathlib import Path

import pytest

from engine.budget.hook import CALIBRATE_AT
from engine.run import events as ev
from engine.run.control import requests as rq
from engine.run.rundir import RunDir
from tests.integrations.conftest import kinds, read_events, running, send, status_step, wait_until

# Whether transformers is installed, without importing it while the suite is collected (seconds, on every worker):
# the example scripts import it in their own processes.
pytestmark = [pytest.mark.slow, pytest.mark.skipif(find_spec("transformers") is None, reason="needs transformers")]

#: Steps of the resumed process.
MORE = 4
#: What the dashboard waits for an answer (the issue's "engine did not answer within 10 s").
ANSWER_S = 10


def _paused_checkpoints(run: Path) -> dict:
    """Pause, two checkpoints while paused, 2 s still paused; the acks, timings and steps seen."""
    assert isinstance(send(run, rq.pause()), ev.SettingChanged)
    held = status_step(run)
    asked = time.monotonic()
    first = send(run, rq.checkpoint_now(), timeout=ANSWER_S)
    answered_s = time.monotonic() - asked
    second = send(run, rq.checkpoint_now(), timeout=ANSWER_S)
    time.sleep(2)  # the window is the behaviour, not a wait: 2 s still paused (the tests check nothing moved)
    return {"held": held, "first": first, "second": second, "answered_s": answered_s,
            "after": status_step(run), "state": RunDir(run).read_status()["state"]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("hf-safety")
    run = root / "run"
    with running("hf_run.py", str(run), "--steps", "100000", "--step-s", "0.05", log=root / "first.out") as first:
        wait_until(lambda: status_step(run) >= 3 or first.poll() is not None, 240, "the Trainer's first steps")
        assert first.poll() is None, (root / "first.out").read_text()[-3000:]
        paused = _paused_checkpoints(run)
        assert isinstance(send(run, rq.resume()), ev.SettingChanged)
        wait_until(lambda: status_step(run) > paused["held"] + 2, 60, "steps after the resume")
        assert isinstance(send(run, rq.abort()), ev.SettingChanged)
        code = first.wait(120)
    before = read_events(run)
    stop = before[-1]["steps"]
    with running("hf_run.py", str(run), "--steps", str(stop + MORE), "--resume", log=root / "second.out") as second:
        resumed_code = second.wait(240)
    return {"run": run, "paused": paused, "first": before, "codes": (code, resumed_code), "stop": stop,
            "later": read_events(run)[len(before):], "out": (root / "second.out").read_text()[-3000:]}


def test_hf_checkpoint_now_while_paused_answers_at_once_and_the_run_stays_paused(runs) -> None:
    paused = runs["paused"]
    first, second = paused["first"], paused["second"]
    assert isinstance(first, ev.SettingChanged) and first.name == "checkpoint", first
    assert paused["answered_s"] < ANSWER_S
    written = Path(first.new)
    assert written.is_absolute() and written == runs["run"] / "hf" / f"checkpoint-{paused['held']}"
    assert (written / "trainer_state.json").is_file()
    # nothing trains while paused: the second request is answered by the same checkpoint, saying why
    assert isinstance(second, ev.SettingChanged) and second.new == first.new and "paused since" in second.reason
    assert paused["after"] == paused["held"] and paused["state"] == "paused"
    assert not [e for e in kinds(runs["run"], "step") if e["step"] > paused["held"]
                and e["t"] < next(s["t"] for s in kinds(runs["run"], "setting") if s["new"] == "running")]


def test_hf_checkpoints_are_named_by_absolute_path_with_their_real_save_time(runs) -> None:
    saved = [e for e in runs["first"] if e["type"] == "checkpoint"]
    assert {e["kind"] for e in saved} == {"manual", "final"}, saved
    assert all(Path(e["path"]).is_absolute() and Path(e["path"]).is_dir() for e in saved)
    assert all(e["seconds"] > 0 and e["bytes"] > 0 for e in saved), [(e["seconds"], e["bytes"]) for e in saved]
    assert runs["codes"][0] == 0 and runs["first"][-1]["status"] == "aborted"


def test_a_resumed_hf_run_says_what_it_resumed_from_and_is_measured_on_its_first_steps(runs) -> None:
    assert runs["codes"][1] == 0, runs["out"]
    later, stop = runs["later"], runs["stop"]
    (started,) = [e for e in later if e["type"] == "run_started"]
    assert started["start_step"] == stop
    assert started["resumed_from"] == str(runs["run"] / "hf" / f"checkpoint-{stop}")
    counted = [e["step"] for e in later if e["type"] == "memory" and e.get("peak")]
    assert counted and counted[0] == stop + CALIBRATE_AT, counted
    assert [e["status"] for e in later if e["type"] == "run_finished"] == ["finished"]
