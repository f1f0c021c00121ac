"""A real engine process (toy task) launched detached, watched and steered through its run directory."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from engine.core.invocation import program
from engine.run.control import requests as control
from engine.run.control import wire
from engine.run.control.launcher import LaunchError, launch
from engine.run.control.session import SessionError
from engine.run.steps import open_record

ENGINE = ["--task", "toy", "--preset", "demo", "--threads", "1", "--eval-every", "0", "--max-steps", "1000000"]


def collect(client, predicate, timeout: float = 30.0) -> list:
    """Poll until ``predicate(events so far)``; the events seen."""
    seen: list = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen += client.poll(0.1)
        if predicate(seen):
            return seen
    raise AssertionError(f"condition not met in {timeout} s; last events {[e.type for e in seen[-5:]]}")


def steps_in_file(run_dir: Path) -> int:
    """The highest step in the run's step record right now (0 before it has one): every step is there, where
    events.jsonl keeps a step line a second."""
    try:
        with open_record(run_dir) as record:
            return record.last_step or 0
    except FileNotFoundError:
        return 0


def rate(run_dir: Path, lo: int, hi: int) -> float:
    """Steps per second from step ``lo`` to ``hi`` (by their wall-clock stamps in the step record)."""
    with open_record(run_dir) as record:
        steps, t = record.window("t", lo, hi)
    if len(steps) < 2 or t[-1] == t[0]:
        return float("nan")
    return float((steps[-1] - steps[0]) / (t[-1] - t[0]))


def hostile(run_dir, payload: bytes, timeout: float = 10.0) -> dict | None:
    sock = wire.connect(run_dir, timeout=timeout)
    try:
        try:
            sock.sendall(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass
        line = wire.read_line(sock, time.monotonic() + timeout, limit=1 << 20)
    finally:
        sock.close()
    return json.loads(line) if line else None


@pytest.mark.slow
def test_launch_watch_steer_and_abort(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    engine = launch(ENGINE, run_dir, timeout=120)
    try:
        client = engine.client()
        assert client.liveness() == "live"
        history = list(client.history())  # up as soon as the socket exists: maybe only the schema so far
        calm = collect(client, lambda evs: steps_in_file(run_dir) >= 30)
        assert history[0].type == "schema" and any(e.type == "run_started" for e in history + calm)
        calm = (1, steps_in_file(run_dir))

        # pause: the ack arrives and the step count in events.jsonl stops
        sent = time.perf_counter()
        ack = client.send(control.pause(), timeout=10)
        pause_ms = (time.perf_counter() - sent) * 1e3
        assert ack.type == "setting" and ack.new == "paused"
        at_pause = steps_in_file(run_dir)
        assert at_pause <= ack.step + 1
        late = [e for e in client.poll(1.0) if e.type == "step" and e.step > ack.step]
        assert late == [] and steps_in_file(run_dir) == at_pause, "no step is written while paused"

        sent = time.perf_counter()
        assert client.send(control.resume(), timeout=10).new == "running"
        resume_ms = (time.perf_counter() - sent) * 1e3
        collect(client, lambda evs: steps_in_file(run_dir) > at_pause)

        saved = client.send(control.checkpoint_now(), timeout=10)
        assert saved.type == "setting" and saved.name == "checkpoint"
        assert Path(saved.new).is_file() and Path(saved.new).parent == run_dir / "checkpoints"

        refused = client.send(control.set_value("attn_backend", "math"), timeout=10)
        assert refused.type == "refused" and "attn_backend" in refused.why

        # hostile input next to a busy channel: each gets an error reply, the run goes on
        silent: list = []
        quiet = threading.Thread(target=lambda: silent.append(hostile(run_dir, b"")))
        quiet.start()
        assert "malformed JSON" in hostile(run_dir, b"{{{\n")["error"]
        assert "unknown action" in hostile(run_dir, b'{"v": 1, "id": "z", "action": "rm -rf"}\n')["error"]
        assert "over 65536 bytes" in hostile(run_dir, b"[" + b"1," * (5 << 20) + b"1]\n")["error"]

        answers: dict = {}

        def storm(i: int) -> None:
            try:
                if i % 2:
                    answers[i] = client.hello(timeout=20)["type"]
                else:
                    answers[i] = client.send(control.set_value("lr", 1e-3), timeout=20).type
            except SessionError as exc:
                answers[i] = f"error: {exc}"

        start = steps_in_file(run_dir)
        collect(client, lambda evs: steps_in_file(run_dir) >= start + 20)
        before = (start, steps_in_file(run_dir))
        crowd = [threading.Thread(target=storm, args=(i,)) for i in range(50)]
        for t in crowd:
            t.start()
        while any(t.is_alive() for t in crowd):
            client.poll(0.1)
        collect(client, lambda evs: steps_in_file(run_dir) >= before[1] + 10)
        during = (before[1], steps_in_file(run_dir))
        quiet.join(15)
        assert sorted(answers) == list(range(50))
        assert all(a in ("hello", "setting") for a in answers.values()), answers
        assert silent and "no complete request line" in silent[0]["error"]
        with capsys.disabled():
            print(f"\n[channel e2e] toy steps/s: calm {rate(run_dir, *calm):.1f}, before the storm "
                  f"{rate(run_dir, *before):.1f}, during 50 clients + hostile input {rate(run_dir, *during):.1f}; "
                  f"ack round trip: pause {pause_ms:.0f} ms "
                  f"(at a step boundary), resume {resume_ms:.0f} ms (paused engine)")

        if os.geteuid() == 0:  # another uid cannot even reach the socket (0700 directory, 0600 socket)
            pid = os.fork()
            if pid == 0:
                code = 3
                try:
                    os.setgid(65534)
                    os.setuid(65534)
                    s = socket.socket(socket.AF_UNIX)
                    try:
                        s.connect(str(run_dir / "control.sock"))
                        code = 1
                    except PermissionError:
                        code = 0
                finally:
                    os._exit(code)
            assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0, "uid 65534 must get EACCES"

        # graceful abort: exit 0, a final checkpoint, socket gone
        ack = client.send(control.abort("graceful"), timeout=10)
        assert ack.type == "setting" and ack.new == "aborting"
        assert engine.wait(60) == 0
        assert (run_dir / "checkpoints" / "last.safetensors").is_file()
        tail = collect(client, lambda evs: any(e.type == "run_finished" for e in evs), timeout=5)
        assert [e for e in tail if e.type == "run_finished"][0].status == "aborted"
        assert client.liveness() == "aborted"
        assert not (run_dir / "control.sock").exists()
        with pytest.raises(SessionError, match="not running"):
            client.send(control.pause(), timeout=2)
    finally:
        if engine.poll() is None:
            engine.process.kill()
            engine.wait(10)


@pytest.mark.slow
def test_kill_9_is_reported_as_crashed_with_the_resume_command(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    engine = launch(ENGINE, run_dir, timeout=120)
    client = engine.client(read_only=True)
    try:
        collect(client, lambda evs: any(e.type == "step" for e in evs))
        with pytest.raises(SessionError, match="read-only"):
            client.send(control.pause())
        os.kill(engine.pid, signal.SIGKILL)
        assert engine.wait(10) == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while client.liveness() != "crashed" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.liveness() == "crashed"
        assert client.resume_command() == f"{program()} train --resume {run_dir}"
        with pytest.raises(SessionError, match=r"\(crashed\); resume with: .*sensorlm-tui train --resume"):
            engine.client().send(control.pause(), timeout=2)
        assert len(client.history()) > 3, "the log of a crashed run still opens"
    finally:
        if engine.poll() is None:
            engine.process.kill()


def test_launch_failure_reports_the_engines_own_error(tmp_path: Path) -> None:
    with pytest.raises(LaunchError) as info:
        launch(["--task", "toy", "--threads", "1", "--batch-size", "0"], tmp_path / "bad", timeout=120)
    message = str(info.value)
    assert info.value.exit_code == 2
    assert message.startswith("engine exited with code 2: ") and "batch" in message and "\n" not in message
    assert not (tmp_path / "bad" / "events.jsonl").exists(), "nothing but the log was written"
