"""RunClient without an engine: following a growing events.jsonl, liveness from status.json, send errors."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from engine.run import events as ev
from engine.run.control import requests as control
from engine.run.control import wire
from engine.run.control.client import RunClient
from engine.run.control.session import SessionError
from engine.run.rundir import RunDir


def line(event: ev.Event) -> bytes:
    return (ev.to_json(event) + "\n").encode()


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as out:
        out.write(data)


def test_poll_follows_appends_and_waits_for_partial_lines(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r").create()
    run.events.write_bytes(line(ev.Schema()) + line(ev.StepLogged(step=1)))
    client = RunClient(run.root)
    assert [e.type for e in client.history()] == ["schema", "step"]
    assert client.poll(0.05) == []
    third = line(ev.StepLogged(step=3, loss=0.5))
    append(run.events, line(ev.StepLogged(step=2)) + third[:25])
    assert [e.step for e in client.poll(0.5)] == [2], "the half-written line waits"
    append(run.events, third[25:] + line(ev.EvalDone(step=3, val_loss=0.1)))
    got = client.poll(0.5)
    assert [(e.type, e.step) for e in got] == [("step", 3), ("eval", 3)] and got[0].loss == 0.5
    # A crash tore a line; the resumed engine ended it with a newline: the garbage is skipped.
    append(run.events, third[:30] + b"\n" + line(ev.Warning(text="resumed")))
    assert [e.type for e in client.poll(0.5)] == ["warning"]
    # The file replaced by a new one (a new run in the same directory): followed from its start.
    os.replace(_write(tmp_path / "new.jsonl", line(ev.Schema()) + line(ev.StepLogged(step=1))), run.events)
    assert [e.type for e in client.poll(0.5)] == ["schema", "step"]
    client.close()


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_poll_before_the_file_exists_and_history_of_nothing(tmp_path: Path) -> None:
    client = RunClient(tmp_path / "r")
    assert list(client.history()) == [] and client.poll(0.05) == []
    assert client.liveness() == "unknown" and client.resume_command() is None
    with pytest.raises(SessionError, match="no engine at .*no status.json"):
        client.send(control.pause(), timeout=1)


def test_liveness_and_resume_command_from_status(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r").create()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    status = {"pid": dead.pid, "host": socket.gethostname(), "heartbeat": 0, "state": "running",
              "resume_command": f"sensorlm-tui train --resume {run.root}"}
    run.status.write_text(json.dumps(status))
    client = RunClient(run.root)
    assert client.liveness() == "crashed"
    assert client.resume_command() == f"sensorlm-tui train --resume {run.root}"
    dead_socket = socket.socket(socket.AF_UNIX)
    dead_socket.bind(str(run.socket))  # the file a kill -9 leaves, nobody listening
    dead_socket.close()
    assert not wire.serving(run.root)
    with pytest.raises(SessionError, match=r"not running \(crashed\); resume with: sensorlm-tui train --resume"):
        client.send(control.pause(), timeout=1)
    run.status.write_text(json.dumps({**status, "state": "finished"}))
    assert client.liveness() == "finished" and client.resume_command() is None
    with pytest.raises(SessionError, match=r"run finished"):
        client.send(control.pause(), timeout=1)


def test_read_only_client_never_sends(tmp_path: Path) -> None:
    client = RunClient(tmp_path, read_only=True)
    with pytest.raises(SessionError, match="read-only viewer"):
        client.send(control.checkpoint_now())
