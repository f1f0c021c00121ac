"""Lightning's own basic transformer example in the cockpit, from step 0, through a SIGTERM and a resume.

Two processes of examples/integrations/lightning_run.py with ``--model transformer`` (Lightning's
``demos.Transformer``: ``src_mask`` and the positional table are built on the first forward), shared by the
tests below: the first trains (no sanity check, so the memory trace is the model's first forward) until a
SIGTERM; the second resumes from the checkpoint the SIGTERM left and trains a few steps more.
"""

from __future__ import annotations

import signal
from importlib.util import find_spec
from pathlib import Path

import pytest

from engine.budget.hook import CALIBRATE_AT
from tests.integrations.conftest import kinds, read_events, running, wait_until

# Whether Lightning is installed, without importing it while the suite is collected (seconds, on every worker): the
# example scripts import it in their own processes.
pytestmark = [pytest.mark.slow, pytest.mark.skipif(find_spec("lightning") is None, reason="needs lightning")]

#: Steps of the resumed process after the SIGTERM's checkpoint.
MORE = 6


def _args(run: Path, *args: str) -> tuple[str, ...]:
    return (str(run), "--model", "transformer", "--val-every", "20", *args)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """{"run": the directory, "first": its events after the SIGTERM, "codes": exit codes, "all": every event}."""
    root = tmp_path_factory.mktemp("lightning-safety")
    run = root / "run"
    with running("lightning_run.py", *_args(run, "--steps", "100000", "--step-s", "0.02"),
                 log=root / "first.out") as first:
        wait_until(lambda: len(kinds(run, "step")) >= 8 or first.poll() is not None, 240,
                   "the transformer's first steps")
        assert first.poll() is None, f"exit {first.returncode}:\n{(root / 'first.out').read_text()[-3000:]}"
        first.send_signal(signal.SIGTERM)
        code = first.wait(120)
    before = read_events(run)
    saved = [e for e in before if e["type"] == "checkpoint" and e["kind"] == "final"]
    assert saved, (root / "first.out").read_text()[-3000:]
    stop = saved[-1]["step"]
    with running("lightning_run.py", *_args(run, "--steps", str(stop + MORE), "--resume", saved[-1]["path"]),
                 log=root / "second.out") as second:
        resumed_code = second.wait(240)
    return {"run": run, "first": before, "codes": (code, resumed_code), "stop": stop, "all": read_events(run),
            "out": (root / "second.out").read_text()[-3000:]}


def test_lightning_basic_transformer_trains_from_step_0_after_the_memory_trace(runs) -> None:
    first = runs["first"]
    started = [e for e in first if e["type"] == "run_started"]
    assert len(started) == 1 and started[0]["preset"] == "TokenModel" and started[0]["start_step"] == 0
    steps = [e["step"] for e in first if e["type"] == "step"]
    assert steps[:3] == [1, 2, 3] and len(steps) >= 8  # the first real forward after the trace did not crash
    assert not any(e["type"] == "run_finished" and e["status"] == "failed" for e in first)


def test_lightning_sigterm_is_recorded_as_checkpointed_and_stopped_like_the_engines(runs) -> None:
    finished = [e for e in runs["first"] if e["type"] == "run_finished"]
    assert len(finished) == 1, finished
    end = finished[0]
    assert (end["status"], end["reason"]) == ("aborted", "SIGTERM: checkpointed and stopped"), end
    assert end["exit_code"] == runs["codes"][0] == 0  # Lightning ends the fit with SystemExit(): the script's 0
    assert Path(end["checkpoint"]).is_absolute() and Path(end["checkpoint"]).is_file()
    assert Path(end["checkpoint"]).name == f"interrupted-step={runs['stop']}.ckpt"
    assert any(e["type"] == "state" and e["state"] == "aborted" for e in runs["first"])


def test_a_lightning_run_resumed_from_its_own_checkpoint_trains_and_is_measured_on_its_first_steps(runs) -> None:
    assert runs["codes"][1] == 0, runs["out"]
    later = runs["all"][len(runs["first"]):]
    (started,) = [e for e in later if e["type"] == "run_started"]
    stop = runs["stop"]
    assert started["start_step"] == stop
    assert started["resumed_from"] == str(runs["run"] / "checkpoints" / f"interrupted-step={stop}.ckpt")
    counted = [e["step"] for e in later if e["type"] == "memory" and e.get("peak")]
    assert counted and counted[0] == stop + CALIBRATE_AT, counted  # the second step of this process
    assert [e["status"] for e in later if e["type"] == "run_finished"] == ["finished"]
    assert max(e["step"] for e in later if e["type"] == "step") == stop + MORE
