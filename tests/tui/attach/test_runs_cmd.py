"""`sensorlm-tui runs`: real live / finished / aborted / crashed runs listed correctly, from the log's tail only."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from engine.run import events as ev
from tests.conftest import output, program, run_cli
from tests.tui.attach.conftest import wait_for_step
from tui.model.run_index import summarize


@pytest.mark.slow
def test_lists_live_finished_aborted_and_crashed_runs(tmp_path: Path, engines) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    engines(runs / "live")
    finished = engines(runs / "finished", "--eval-every", "10", max_steps=20)
    aborted = engines(runs / "aborted")
    crashed = engines(runs / "crashed")
    wait_for_step(runs / "aborted", 5)
    aborted.send_signal(signal.SIGTERM)  # graceful: checkpoint at the next boundary, then stop
    wait_for_step(runs / "crashed", 5)
    os.kill(crashed.pid, signal.SIGKILL)
    assert finished.wait(120) == 0
    assert aborted.wait(60) == 130
    crashed.wait(10)
    wait_for_step(runs / "live", 3)

    result = run_cli("runs", str(runs), "--json")
    assert result.returncode == 0, result.stderr
    by_name = {r["name"]: r for r in json.loads(result.stdout)}
    assert {n: r["state"] for n, r in by_name.items()} == {
        "live": "live", "finished": "finished", "aborted": "aborted", "crashed": "crashed"}
    assert by_name["finished"]["step"] == 20 and by_name["finished"]["total_steps"] == 20
    assert by_name["finished"]["best"] is not None and by_name["finished"]["best_metric"]
    assert by_name["finished"]["last_checkpoint_step"] == 20
    # The graceful abort wrote a checkpoint at the step it stopped on, and it is on disk.
    assert by_name["aborted"]["last_checkpoint_step"] == by_name["aborted"]["step"] >= 5
    assert Path(by_name["aborted"]["last_checkpoint"]).is_file()
    assert by_name["crashed"]["step"] >= 5 and by_name["live"]["step"] >= 3
    assert all(r["total_steps"] == 100_000 for n, r in by_name.items() if n != "finished")

    table = run_cli("runs", str(runs)).stdout.splitlines()
    assert table[0].split()[:3] == ["NAME", "STATE", "STEP"]
    cells = {line.split()[0]: line.split() for line in table[1:]}
    assert cells["finished"][1:3] == ["finished", "20/20"]
    assert cells["crashed"][1] == "crashed" and cells["aborted"][1] == "aborted"
    assert cells["live"][1] == "live"


def _line(event: ev.Event) -> bytes:
    return (ev.to_json(event) + "\n").encode()


def test_summary_reads_the_tail_not_the_whole_log(tmp_path: Path) -> None:
    """A 4 GiB log (sparse: a hole in the middle) summarises correctly; decoding it whole would not finish."""
    run = tmp_path / "big"
    run.mkdir()
    log = run / "events.jsonl"
    with open(log, "wb") as out:
        out.write(_line(ev.Schema()) + _line(ev.RunStarted(name="big", total_steps=2_000_000)))
        out.seek(4 << 30)  # a hole: no disk used, but every byte of it would have to be read and parsed
        out.write(b"\n" + _line(ev.CheckpointSaved(step=999_000, path=str(run / "checkpoints/last.safetensors"))))
        out.write(_line(ev.EvalDone(step=999_500, val_loss=0.1, metrics={"psnr_db": 31.5},
                                       primary="psnr_db", best=32.25)))
        for step in range(999_990, 1_000_001):
            out.write(_line(ev.StepLogged(step=step, loss=0.1)))
        out.write(b'{"type":"step","t":1.0,"step":1000001,"lo')  # torn last line: the engine was killed mid-write
    summary = summarize(run)
    assert summary.step == 1_000_000
    assert summary.total_steps == 2_000_000
    assert summary.best == 32.25 and summary.best_metric == "psnr_db"
    assert summary.last_checkpoint_step == 999_000
    assert summary.state == "unknown"  # no status.json: the engine never got that far, or it is not ours


def test_missing_or_bad_dir_is_one_line_exit_2(tmp_path: Path) -> None:
    missing = run_cli("runs", str(tmp_path / "nope"))
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        f"sensorlm-tui: error: runs {tmp_path / 'nope'}: no such directory; "
        f"give the directory that holds your runs (default ./runs)"]
    (tmp_path / "file").write_text("x")
    not_dir = run_cli("runs", str(tmp_path / "file"))
    assert not_dir.returncode == 2 and "not a directory" in not_dir.stderr and "Traceback" not in not_dir.stderr


def test_empty_dir_says_no_runs(tmp_path: Path) -> None:
    (tmp_path / "not-a-run").mkdir()  # a directory without run files is not listed
    result = run_cli("runs", str(tmp_path))
    assert result.returncode == 0
    assert result.stdout.strip() == f"no runs in {tmp_path}/ (start one with `{program()} train`)"
    assert json.loads(run_cli("runs", str(tmp_path), "--json").stdout) == []


def test_a_hostile_status_json_does_not_break_the_listing(tmp_path: Path) -> None:
    """A status.json with pid 1e20 (os.kill's OverflowError) must cost its own row, not the whole `runs` listing."""
    runs = tmp_path / "runs"
    for name, status in (("huge_pid", '{"pid": 1e20, "host": "x", "state": "running", "heartbeat": 1e300}'),
                         ("wrong_types", '{"pid": "1", "heartbeat": "soon", "started": [], "step": 1.5}'),
                         ("not_object", "[1, 2]"), ("fine", '{"pid": 1, "state": "finished", "started": 5}')):
        (runs / name).mkdir(parents=True)
        (runs / name / "status.json").write_text(status)
    result = run_cli("runs", str(runs), "--json")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    by_name = {r["name"]: r for r in json.loads(result.stdout)}
    assert set(by_name) == {"huge_pid", "wrong_types", "not_object", "fine"}
    assert by_name["huge_pid"]["pid"] is None and by_name["fine"]["state"] == "finished"
    assert run_cli("runs", str(runs)).returncode == 0


def test_runs_json_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    """`runs --json | head -1`: no BrokenPipeError traceback."""
    import subprocess
    import sys

    from tests.conftest import ROOT, cli_env

    runs = tmp_path / "runs"
    for i in range(400):  # more output than a pipe buffer holds
        (runs / f"run-{i:03d}").mkdir(parents=True)
        (runs / f"run-{i:03d}" / "status.json").write_text('{"pid": 1, "state": "finished", "started": 5}')
    proc = subprocess.Popen([sys.executable, "-m", "tui.cli", "runs", str(runs), "--json"], cwd=ROOT, env=cli_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()  # what head does after its lines
    err = proc.stderr.read().decode()
    assert proc.wait(60) == 141 and err == "", err


def test_the_table_fits_80_columns_and_says_interrupted_as_the_dashboard_did(monkeypatch) -> None:
    from tui.commands import runs as runs_cmd
    from tui.commands.runs import table
    from tui.model.run_index import RunSummary

    monkeypatch.setattr(runs_cmd, "_trend", lambda run: "▁▂▃▄▅▆▇█")  # a full-width trend, as a real run has

    def summary(name, state, finished_as, step, best, metric) -> RunSummary:
        return RunSummary(name=name, path=f"/nowhere/{name}", state=state, run_state=None, step=step,
                          total_steps=1_000_000, best=best, best_metric=metric,
                          last_checkpoint=f"/nowhere/{name}/checkpoints/last.safetensors", last_checkpoint_step=step,
                          started=0.0, updated=0.0, pid=None, host=None, exit_code=130, resume_command="",
                          finished_as=finished_as)

    runs = [summary("20261204-141503", "aborted", "interrupted", 999_000, 32.25, "psnr_db dB"),
            summary("lm-tiny", "aborted", "aborted", 12, 264.9, "perplexity")]
    lines = table(runs, now=3 * 86400.0).splitlines()
    assert max(map(len, lines)) <= 80, "\n".join(lines)
    assert lines[1].split()[1] == "interrupted" and lines[2].split()[1] == "aborted"
    assert "32.25 dB" in lines[1] and "264.9 perplexity" in lines[2] and lines[1].endswith("3d")


def _write_run(root: Path, name: str, events: list[ev.Event], status: dict | None = None) -> Path:
    run = root / name
    run.mkdir(parents=True)
    (run / "events.jsonl").write_text("".join(ev.to_json(e) + "\n" for e in [ev.Schema(t=1.0), *events]))
    if status is not None:
        (run / "status.json").write_text(json.dumps(status))
    return run


def _dead_status(**fields) -> dict:
    """status.json of a process that is gone (pid above pid_max's default), on this host."""
    import socket

    return {"pid": 2 ** 22 + 12345, "host": socket.gethostname(), "heartbeat": 1.0, "state": "running", **fields}


def test_integration_runs_fit_80_columns_shortened_in_the_middle_and_whole_in_json(tmp_path: Path) -> None:
    """The cells integration runs bring (a Trainer's `checkpoint-N` directory, a best without a unit, a long script
    name, a live run's engine state) made the header 96 wide and every row wrap: each now gives way in its middle,
    the best keeps its number, and --json keeps every value whole."""
    import socket

    runs = tmp_path / "runs"
    long_name = "20261205-091031-lightning-basic-transformer"
    checkpoint = runs / long_name / "checkpoint-1000000"
    _write_run(runs, long_name, [
        ev.RunStarted(t=2.0, name=long_name, task="lightning", total_steps=2_000_000),
        ev.EvalDone(t=3.0, step=1_000_000, val_loss=0.01096, metrics={"val_loss": 0.01096}, primary="val_loss",
                    best=0.010957),
        ev.CheckpointSaved(t=3.0, step=1_000_000, path=str(checkpoint), kind="last"),
        ev.AutotuneChose(t=4.0, step=10, status="cancelled")],
        {"pid": os.getpid(), "host": socket.gethostname(), "heartbeat": time.time(), "state": "checkpointing",
         "started": time.time() - 5, "step": 1_234_567, "total_steps": 2_000_000,
         "last_checkpoint": str(checkpoint)})
    _write_run(runs, "demo", [ev.RunStarted(t=2.0, name="demo", total_steps=300)],
               _dead_status(started=time.time() - 90_000, step=42, total_steps=300))
    table = run_cli("runs", str(runs))
    lines = table.stdout.splitlines()
    assert table.returncode == 0 and len(lines) == 3, output(table)
    assert max(map(len, lines)) <= 80, "\n" + table.stdout
    row = lines[1]
    name = row.split()[0]  # the name gives way in its middle: both ends stay
    assert "…" in name and long_name.startswith(name.split("…")[0]) and long_name.endswith(name.split("…")[1])
    assert " 0.01096 " in row, "the best keeps its number whole"
    assert "checkpoint-1000000" not in row and " @1M " in row  # a Trainer's checkpoint-N: its step, once
    whole = {r["name"]: r for r in json.loads(run_cli("runs", str(runs), "--json").stdout)}
    assert whole[long_name]["last_checkpoint"] == str(checkpoint) and whole[long_name]["best"] == 0.010957
    assert whole[long_name]["best_metric"] == "val_loss" and whole[long_name]["step"] == 1_234_567


def test_runs_json_is_json_when_a_value_is_not_finite(tmp_path: Path) -> None:
    """A first evaluation of NaN made `best` NaN, and `runs --json` printed a bare NaN, which no JSON reader takes."""
    runs = tmp_path / "runs"
    _write_run(runs, "nan-best", [
        ev.RunStarted(t=2.0, name="nan-best", total_steps=10),
        ev.StepLogged(t=3.0, step=1, loss=float("inf")),
        ev.EvalDone(t=3.0, step=1, val_loss=float("nan"), metrics={"val_loss": float("nan")}, primary="val_loss",
                    best=float("nan"))], _dead_status(step=1))
    result = run_cli("runs", str(runs), "--json")

    def refuse(token: str):
        raise AssertionError(f"not JSON: {token}")

    (listed,) = json.loads(result.stdout, parse_constant=refuse)
    assert listed["best"] is None and listed["best_metric"] == "val_loss"


def test_run_names_are_shown_escaped_never_raw(tmp_path: Path) -> None:
    """An ESC sequence in a run's name coloured the `runs` table and a newline broke it into two rows."""
    runs = tmp_path / "runs"
    hostile = "evil\x1b[31mred\nsecond-line"
    _write_run(runs, hostile, [ev.RunStarted(t=2.0, name=hostile, total_steps=10)], _dead_status(step=1))
    _write_run(runs, "plain", [ev.RunStarted(t=3.0, name="plain", total_steps=10)], _dead_status(step=1))
    result = run_cli("runs", str(runs))
    assert "\x1b" not in result.stdout and len(result.stdout.splitlines()) == 3, result.stdout
    assert any(line.startswith("evil\\x1b[31mred\\nsecond") for line in result.stdout.splitlines())


def test_a_fresh_rerun_into_the_same_directory_shows_only_its_own_facts(tmp_path: Path) -> None:
    """A script run to step 91 (its best, its `finished`), then rerun fresh into the same directory and killed at
    step 43: `runs` showed 91/860 with the first run's best and ending. It reads only the current run's events;
    a resume, which continues its run, still counts what came before it."""
    runs = tmp_path / "runs"
    first = [ev.RunStarted(t=2.0, name="mine", total_steps=860)]
    first += [ev.StepLogged(t=2.0 + i, step=i, loss=1.0 / i) for i in range(1, 92)]
    first += [ev.EvalDone(t=95.0, step=91, val_loss=0.5, metrics={"val_loss": 0.5}, primary="val_loss", best=0.5),
              ev.CheckpointSaved(t=95.0, step=91, path=str(runs / "mine" / "last.pt"), kind="final"),
              ev.RunFinished(t=96.0, status="finished", steps=91, best=0.5)]
    rerun = [ev.RunStarted(t=100.0, name="mine", total_steps=300)]
    rerun += [ev.StepLogged(t=100.0 + i, step=i, loss=1.0 / i) for i in range(1, 44)]
    _write_run(runs, "mine", first + rerun, _dead_status(step=40, total_steps=300))
    (mine,) = json.loads(run_cli("runs", str(runs), "--json").stdout)
    assert (mine["step"], mine["total_steps"], mine["state"]) == (43, 300, "crashed")
    assert mine["best"] is None and mine["finished_as"] is None and mine["last_checkpoint"] is None
    assert run_cli("runs", str(runs)).stdout.splitlines()[1].split()[1:3] == ["crashed", "43/300"]

    resumed = rerun + [ev.CheckpointSaved(t=150.0, step=43, path=str(runs / "again" / "last.pt"), kind="last"),
                       ev.RunStarted(t=200.0, name="again", total_steps=300, start_step=43, resumed_from="last.pt")]
    resumed += [ev.StepLogged(t=200.0 + i, step=43 + i, loss=1.0 / i) for i in range(1, 5)]
    _write_run(runs, "again", first + resumed, _dead_status(step=47, total_steps=300))
    again = {r["name"]: r for r in json.loads(run_cli("runs", str(runs), "--json").stdout)}["again"]
    assert again["step"] == 47 and again["last_checkpoint_step"] == 43 and again["finished_as"] is None


def test_the_step_listed_is_the_step_records_newest_not_the_logs_last_step_line(tmp_path: Path) -> None:
    """A run killed between two of its cadence step lines: its record holds 1,500 steps, its log's last step line
    and status.json say 1,000. `runs` lists what `attach` shows: step 1,500."""
    import numpy as np

    from engine.run.rundir import RunDir
    from engine.run.steps import StepWriter

    run = tmp_path / "killed"
    writer = StepWriter(run / "steps")
    writer.append_columns(np.arange(1, 1501), {"loss": np.full(1500, 0.5, np.float32)})
    writer.close()
    with open(run / "events.jsonl", "wb") as out:
        out.write(_line(ev.Schema()) + _line(ev.RunStarted(name="killed", total_steps=10_000)))
        out.write(_line(ev.StepLogged(step=1_000, loss=0.5)))
    (run / "status.json").write_text(json.dumps({"state": "running", "step": 1_000, "total_steps": 10_000}))
    assert RunDir(run).read_status()["step"] == 1_000
    assert summarize(run).step == 1_500
    for name in ("step.i8", "catalog.jsonl"):  # a FIFO under a record's name: never waited on for a writer
        os.remove(run / "steps" / name)
        os.mkfifo(run / "steps" / name)
        listed = run_cli("runs", str(tmp_path), timeout=60)
        assert listed.returncode == 0 and "killed" in listed.stdout and "1000/10000" in listed.stdout, output(listed)
