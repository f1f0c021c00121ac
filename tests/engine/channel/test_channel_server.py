"""ControlServer against a fake engine loop: acks, hostile input, many clients, other users, long paths."""

from __future__ import annotations

import json
import os
import select
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from channel_fakes import FakeEngine  # pytest puts this test directory on sys.path

from engine.run.control import channel, wire
from engine.run.control import requests as control
from engine.run.control.client import RunClient
from engine.run.control.requests import Controls
from engine.run.control.session import SessionError
from engine.run.rundir import RunDir
from engine.run.sinks import EventBus
from tests.conftest import ROOT, cli_env, holds_for, wait_until


class Rig:
    """A run directory with a fake engine and a control server on it."""

    def __init__(self, root: Path, answer: bool = True, **server_kw) -> None:
        self.run_dir = RunDir(root).create()
        self.controls, self.bus = Controls(), EventBus()
        self.engine = FakeEngine(self.bus, self.controls, answer=answer).start()
        self.server = channel.ControlServer(self.run_dir, self.controls, self.bus, **server_kw).start()
        self.client = RunClient(root)

    def close(self) -> None:
        self.server.stop()
        self.engine.stop()


@pytest.fixture
def rig(tmp_path: Path):
    r = Rig(tmp_path / "run", line_timeout=0.5)
    yield r
    r.close()


def raw(run_dir: RunDir, payload: bytes, timeout: float = 5.0) -> dict | None:
    """Send bytes as they are and read one reply line (None when the server closed without one)."""
    sock = wire.connect(run_dir, timeout=timeout)
    try:
        try:
            sock.sendall(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server hung up on an oversized message; its reply may still be readable
        line = wire.read_line(sock, time.monotonic() + timeout, limit=1 << 20)
    finally:
        sock.close()
    return json.loads(line) if line else None


def test_requests_are_acked_and_the_socket_is_owner_only(rig: Rig) -> None:
    mode = os.stat(rig.run_dir.socket).st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    wait_until(lambda: rig.engine.step > 3, 5, "the fake engine stepping", 0.01)
    ack = rig.client.send(control.pause(), timeout=2)
    assert ack.type == "setting" and ack.new == "paused"
    stopped_at = rig.engine.step
    holds_for(lambda: rig.engine.step <= stopped_at + 1, 0.2, "a paused engine takes no step")
    assert rig.client.send(control.resume(), timeout=2).new == "running"
    refused = rig.client.send(control.set_value("attn_backend", "math"), timeout=2)
    assert refused.type == "refused" and "no attn_backend" in refused.why
    hello = rig.client.hello()
    assert hello["pid"] == os.getpid() and hello["run"] == "run" and hello["step"] >= stopped_at
    rig.server.stop()
    assert not rig.run_dir.socket.exists(), "socket removed on stop"


def test_hostile_input_is_rejected_and_the_run_goes_on(rig: Rig) -> None:
    wait_until(lambda: rig.engine.step > 3, 5, "the fake engine stepping", 0.01)
    cases = {
        b"{not json\n": "malformed JSON",
        b"[1, 2]\n": "JSON object",
        b'{"v": 1, "id": "a", "action": "explode"}\n': "unknown action",
        b'{"v": 99, "id": "a", "action": "pause"}\n': "version",
        b'{"v": 1, "id": "a", "action": "pause", "sudo": true}\n': "unknown request field",
        b'{"v": 1, "id": "a", "action": "set", "name": "lr", "value": {"x": 1}}\n': "lr must be a boolean",
        b'{"v": 1, "op": "shell"}\n': "unknown op",
        b"\xff\xfe\n": "malformed JSON",
        b"[" * 60000 + b"\n": "malformed JSON",
    }
    for payload, needle in cases.items():
        reply = raw(rig.run_dir, payload)
        assert reply["type"] == "error" and needle in reply["error"], (payload, reply)
    big = raw(rig.run_dir, b'{"v": 1, "pad": "' + b"x" * (10 << 20) + b'"}\n')
    assert big["type"] == "error" and "over 65536 bytes" in big["error"]
    started = time.monotonic()
    silent = raw(rig.run_dir, b"")
    assert "no complete request line" in silent["error"] and time.monotonic() - started < 3

    def slow_loris() -> dict:
        """One byte every 50 ms, never a newline: the server must give up on its own."""
        sock = wire.connect(rig.run_dir)
        try:
            for byte in b'{"v": 1, "id": "s", "action": "pause"':
                if select.select([sock], [], [], 0.05)[0]:
                    break  # the server answered (and hung up)
                sock.sendall(bytes([byte]))
            return json.loads(wire.read_line(sock, time.monotonic() + 5))
        finally:
            sock.close()

    assert "no complete request line" in slow_loris()["error"]
    before = rig.engine.step
    assert rig.client.send(control.checkpoint_now(), timeout=2).type == "setting"
    wait_until(lambda: rig.engine.step > before + 3, 5, "the run going on", 0.01)
    assert [r.action for r in rig.engine.received] == ["checkpoint_now"], "only the valid request reached the loop"
    assert rig.server.rejected >= 3


def test_fifty_clients_at_once_are_all_served(rig: Rig) -> None:
    results: dict[int, object] = {}

    def one(i: int) -> None:
        try:
            results[i] = rig.client.send(control.set_value("lr", 1e-3 * (i + 1)), timeout=10)
        except SessionError as exc:
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert len(results) == 50
    assert all(getattr(r, "type", None) == "setting" for r in results.values()), results
    assert sorted(r.new for r in results.values()) == sorted(1e-3 * (i + 1) for i in range(50))


_HOG = """
import sys, time
from pathlib import Path
from engine.run.control import wire
held = []
for _ in range(int(sys.argv[2])):
    held.append(wire.connect(Path(sys.argv[1])))
print("holding", flush=True)
time.sleep(60)
"""


def _hog(run_dir: RunDir, n: int) -> subprocess.Popen:
    """Another process of the same user opening ``n`` connections and keeping them idle."""
    proc = subprocess.Popen([sys.executable, "-c", _HOG, str(run_dir.root), str(n)], cwd=ROOT, env=cli_env(),
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "holding"
    return proc


def _held_by(r: Rig, pid: int) -> int:
    return r.server.viewer_pids().count(pid)


def test_one_client_process_cannot_take_every_slot(tmp_path: Path) -> None:
    """A same-user client holding all 64 slots must not lock the dashboard out: the newcomer evicts its oldest."""
    r = Rig(tmp_path / "run", line_timeout=30.0)
    hog = _hog(r.run_dir, channel.MAX_CLIENTS)
    try:
        wait_until(lambda: _held_by(r, hog.pid) == channel.MAX_CLIENTS, 5, "the hog holding every slot", 0.01)
        assert r.client.send(control.pause(), timeout=2).new == "paused"  # was: "too many clients (64 connected)"
        wait_until(lambda: _held_by(r, hog.pid) == channel.MAX_CLIENTS - 1, 5, "the hog's oldest evicted",
                   0.01)
    finally:
        hog.kill()
        hog.wait()
        r.close()


def test_when_every_slot_is_taken_a_newcomer_evicts_the_greediest_clients_oldest(tmp_path: Path) -> None:
    r = Rig(tmp_path / "run", max_clients=3, line_timeout=30.0)
    hog = _hog(r.run_dir, 3)
    held = []
    try:
        wait_until(lambda: _held_by(r, hog.pid) == 3, 5, "the hog holding every slot", 0.01)
        held.append(wire.connect(r.run_dir))  # the test process: a 4th client, every slot taken
        wait_until(lambda: _held_by(r, os.getpid()) == 1 and _held_by(r, hog.pid) == 2, 5,
                   "the newcomer in, the hog's oldest out", 0.01)
        assert r.client.send(control.pause(), timeout=2).new == "paused"
    finally:
        for sock in held:
            sock.close()
        hog.kill()
        hog.wait()
        r.close()


def test_unanswered_requests_time_out_and_stop_answers_the_waiting(tmp_path: Path) -> None:
    r = Rig(tmp_path / "run", answer=False, ack_timeout=0.3)
    try:
        with pytest.raises(SessionError, match="did not answer within 0.3 s"):
            r.client.send(control.pause(), timeout=5)
        r.server.ack_timeout = 30
        req = control.pause()
        line = (json.dumps(req.to_dict()) + "\n").encode()
        replies: list = []
        first = threading.Thread(target=lambda: replies.append(raw(r.run_dir, line)))
        first.start()
        wait_until(lambda: req.id in [got.id for got in r.engine.received], 5, "the request waiting for its answer",
                   0.01)
        dup = raw(r.run_dir, line)
        assert "already waiting" in dup["error"]
        r.server.stop()
        first.join(5)
        assert replies and "engine stopped before answering" in replies[0]["error"]
    finally:
        r.close()


def test_deep_run_directory_beyond_the_socket_path_limit(tmp_path: Path) -> None:
    root = tmp_path / ("d" * 60) / ("e" * 60) / "run"
    assert len(os.fsencode(str(root / "control.sock"))) > wire.SUN_PATH_MAX
    r = Rig(root)
    try:
        assert r.run_dir.socket.exists() and stat.S_ISSOCK(os.stat(r.run_dir.socket).st_mode)
        assert r.client.send(control.pause(), timeout=2).new == "paused"
    finally:
        r.close()
    assert not r.run_dir.socket.exists()


def test_a_stale_socket_is_replaced_and_a_live_one_is_not(tmp_path: Path) -> None:
    root = tmp_path / "run"
    run_dir = RunDir(root).create()
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(run_dir.socket))
    dead.close()  # what a kill -9 leaves behind: the file, nobody listening
    r = Rig(root)
    try:
        assert r.client.send(control.pause(), timeout=2).new == "paused"
        with pytest.raises(channel.ChannelError, match="another engine is serving"):
            channel.ControlServer(run_dir, Controls(), EventBus()).start()
        assert r.client.send(control.resume(), timeout=2).new == "running", "the live server was left alone"
    finally:
        r.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to another uid (setuid 65534)")
def test_another_uid_cannot_control_the_run() -> None:
    base = Path(tempfile.mkdtemp(prefix="chan-uid-", dir="/tmp"))
    os.chmod(base, 0o711)  # others may traverse, not list
    r = Rig(base / "run")
    try:
        def as_nobody() -> tuple[int, str]:
            """Fork, drop to uid 65534, try the socket; the child reports through a pipe."""
            rfd, wfd = os.pipe()
            pid = os.fork()
            if pid == 0:  # child: only raw syscalls, no locks another thread might hold
                try:
                    os.setgid(65534)
                    os.setuid(65534)
                    sock = socket.socket(socket.AF_UNIX)
                    sock.settimeout(30)  # generous: a loaded 2-core box can take seconds to schedule the server
                    try:
                        sock.connect(str(r.run_dir.socket))
                        try:
                            sock.sendall(b'{"v": 1, "id": "x", "action": "pause"}\n')
                        except BrokenPipeError:
                            pass  # the server may refuse and close before reading; its reply is still buffered
                        out = b"reply " + sock.recv(4096)
                    except PermissionError:
                        out = b"EACCES"
                    except OSError as exc:  # say what happened instead of an empty answer
                        out = f"error {exc!r}".encode()
                    os.write(wfd, out)
                finally:
                    os._exit(0)
            os.close(wfd)
            os.waitpid(pid, 0)
            with os.fdopen(rfd, "rb") as handle:
                return handle.read().decode()

        assert as_nobody() == "EACCES", "0700 run directory and 0600 socket keep other users out"
        os.chmod(r.run_dir.root, 0o711)
        os.chmod(r.run_dir.socket, 0o666)  # someone loosened the permissions: the peer check still holds
        out = as_nobody()
        assert out.startswith("reply ") and "permission denied: uid 65534" in out, out
        assert r.engine.received == [], "nothing reached the loop"
    finally:
        r.close()
        import shutil

        shutil.rmtree(base, ignore_errors=True)
