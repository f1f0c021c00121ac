"""`sensorlm-tui runs`: real live / finished / aborted / crashed runs listed correctly, from the log's tail only."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from engine.run import events as ev
from tests.conftest import program, run_cli
from tests.tui.attach.conftest import wait_for_step
from tui.model.run_index import summarize


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
