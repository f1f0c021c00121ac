"""A client talks only to its own run's engine: never through a link or a hard link to another engine's socket,
never to a socket (or a process) of another uid; an engine never takes a planted link for a live engine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from channel_fakes import FakeEngine  # pytest puts this test directory on sys.path

from engine.run.control import channel
from engine.run.control import requests as control
from engine.run.control.client import RunClient
from engine.run.control.requests import Controls
from engine.run.control.session import SessionError
from engine.run.rundir import RunDir
from engine.run.sinks import EventBus
from tests.conftest import holds_for


class Live:
    """A run directory with a fake engine serving its control socket under ``run_id``."""

    def __init__(self, root: Path, run_id: str) -> None:
        self.run_dir = RunDir(root).create()
        self.controls, self.bus = Controls(), EventBus()
        self.engine = FakeEngine(self.bus, self.controls).start()
        self.server = channel.ControlServer(self.run_dir, self.controls, self.bus, run_id=run_id).start()
        self.run_dir.status.write_text(json.dumps({"pid": os.getpid(), "run_id": run_id, "state": "running",
                                                   "heartbeat": time.time()}))

    def close(self) -> None:
        self.server.stop()
        self.engine.stop()


def _finished_run(root: Path, run_id: str = "b" * 16) -> RunDir:
    """A run that ended: its status names a pid long gone, and its engine removed its socket."""
    run_dir = RunDir(root).create()
    run_dir.status.write_text(json.dumps({"pid": 4_000_000, "run_id": run_id, "state": "finished",
                                          "heartbeat": time.time() - 3600}))
    return run_dir


@pytest.fixture
def other(tmp_path: Path):
    live = Live(tmp_path / "other", "a" * 16)
    yield live
    live.close()


def test_pause_on_a_finished_run_never_reaches_another_engine_through_a_link(other: Live, tmp_path: Path) -> None:
    finished = _finished_run(tmp_path / "finished")
    finished.socket.symlink_to(other.run_dir.socket)
    with pytest.raises(SessionError, match=r"control\.sock: a symbolic link, not the engine's socket .*pause not sent"):
        RunClient(finished.root).send(control.pause(), timeout=5)
    holds_for(lambda: other.engine.received == [] and not other.engine.paused, 0.1,
              "no request reaching the other engine")


def test_pause_never_reaches_another_engine_through_a_hard_link(other: Live, tmp_path: Path) -> None:
    """A hard link is a socket of the right owner: the engine's hello gives its run id, which is not this run's."""
    finished = _finished_run(tmp_path / "finished")
    os.link(other.run_dir.socket, finished.socket)
    with pytest.raises(SessionError, match=f"answers for another engine \\(run id {'a' * 16}, this run's is "
                                           f"{'b' * 16}\\); pause not sent"):
        RunClient(finished.root).send(control.pause(), timeout=5)
    holds_for(lambda: other.engine.received == [] and not other.engine.paused, 0.1,
              "no request reaching the other engine")
    assert RunClient(other.run_dir.root).send(control.pause(), timeout=5).new == "paused", "its own client still can"


def test_an_engine_replaces_a_planted_link_instead_of_taking_it_for_a_live_engine(other: Live, tmp_path: Path) -> None:
    """An engine starting where control.sock links to another engine's socket saw "another engine is serving" and
    died with a ChannelError traceback, leaving a half-made run."""
    mine = RunDir(tmp_path / "mine").create()
    mine.socket.symlink_to(other.run_dir.socket)
    server = channel.ControlServer(mine, Controls(), EventBus(), run_id="c" * 16).start()
    try:
        assert not mine.socket.is_symlink() and mine.socket.exists()
        assert RunClient(other.run_dir.root).hello()["run_id"] == "a" * 16, "the other engine's socket is untouched"
        assert RunClient(mine.root).hello()["run_id"] == "c" * 16
    finally:
        server.stop()


# A fake engine of uid 65534 in a run directory someone loosened (0777): it takes over control.sock and answers
# every line with a "paused" acknowledgement, writing what it received to its stdout.
_IMPOSTOR = r"""
import json, os, socket, sys
run = sys.argv[1]
sock = socket.socket(socket.AF_UNIX)
sock.bind(os.path.join(run, ".fake"))
os.rename(os.path.join(run, ".fake"), os.path.join(run, "control.sock"))
sock.listen(4)
print("ready", flush=True)
sock.settimeout(3)
try:
    while True:
        conn, _ = sock.accept()
        data = conn.recv(65536)
        if not data:  # the client hung up without a word: it saw whose listener this is
            conn.close()
            continue
        print("received", data.decode(errors="replace").strip(), flush=True)
        rid = json.loads(data.splitlines()[-1]).get("id")
        conn.sendall((json.dumps({"type": "setting", "name": "state", "old": "running", "new": "paused",
                                  "step": 1, "request_id": rid, "t": 0.0}) + "\n").encode())
        conn.close()
except (socket.timeout, OSError, ValueError):
    pass
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a process as another uid (setpriv --reuid 65534)")
def test_a_socket_of_another_uid_cannot_answer_paused_in_the_engines_name() -> None:
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) is not installed")
    base = Path(tempfile.mkdtemp(prefix="chan-impostor-", dir="/tmp"))
    os.chmod(base, 0o711)
    live = Live(base / "run", "a" * 16)
    try:
        os.chmod(live.run_dir.root, 0o777)  # loosened: the other uid may now replace the socket
        impostor = subprocess.Popen(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                                     sys.executable, "-c", _IMPOSTOR, str(live.run_dir.root)],
                                    stdout=subprocess.PIPE, text=True)
        assert impostor.stdout.readline().strip() == "ready"
        assert live.run_dir.socket.stat().st_uid == 65534
        with pytest.raises(SessionError, match=r"control\.sock: owned by uid 65534, not by the run directory's owner "
                                               r"\(uid 0\); not this run's engine; pause not sent"):
            RunClient(live.run_dir.root).send(control.pause(), timeout=5)
        os.chown(live.run_dir.socket, 0, 0)  # the file passes now: the kernel's word on the listener does not
        with pytest.raises(SessionError, match="the process listening runs as uid 65534, not as the run directory's "
                                               "owner"):
            RunClient(live.run_dir.root).send(control.pause(), timeout=5)
        out, _ = impostor.communicate(timeout=30)
        assert "received" not in out, f"a request reached the impostor: {out}"
    finally:
        live.close()
        shutil.rmtree(base, ignore_errors=True)
