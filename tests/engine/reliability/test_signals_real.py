"""Every signal the engine handles, sent to a real engine process: exit code, checkpoint, log line, resume.

SIGTERM / SIGINT: checkpoint, exit 130, resumable. A second SIGINT while the
graceful checkpoint is being written: stop at once, the previous checkpoint
intact. SIGHUP with the engine on a real pseudo-terminal (it is the session
leader; closing the master is the hang-up): keep training with output moved
to engine.log, or (--on-hangup stop) checkpoint and exit 130. SIGUSR1:
checkpoint now and keep going. SIGTERM during a long evaluation: checkpoint
without finishing the evaluation.
"""

from __future__ import annotations

import os
import pty
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.engine.reliability.harness import TOY, events_of, verify_all

LONG = [*TOY, "--max-steps", "100000", "--eval-every", "0", "--checkpoint-every", "1000"]


def _assert_resumable(engines, run: Path, tmp_path: Path, step: int) -> None:
    """The run resumes at exactly ``step`` and trains on."""
    assert set(verify_all(run / "checkpoints").values()) == {"ok"}
    resumed = engines.spawn(["--resume", str(run), "--max-steps", str(step + 3)], tmp_path)
    assert resumed.wait(60) == 0, resumed.stderr()
    assert resumed.wait_for(r"^start .* at step (\d+)").group(1) == str(step)
    assert resumed.lines()[-1].startswith(f"done  finished at step {step + 3}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_checkpoint_and_exit_130(engines, tmp_path: Path, sig: int) -> None:
    run = tmp_path / "run"
    engine = engines.spawn([*LONG, "--run-dir", str(run)], tmp_path)
    engine.wait_for(r"^step\s+5/")
    engine.signal(sig)
    assert engine.wait(60) == 130, engine.stderr()
    finished = events_of(run, "run_finished")[-1]
    name = signal.Signals(sig).name
    assert finished["reason"] == f"{name}: checkpointed and stopped" and finished["exit_code"] == 130
    step = finished["steps"]
    assert step >= 5 and finished["checkpoint"].endswith("last.safetensors")
    assert [e["step"] for e in events_of(run, "checkpoint")][-1] == step
    assert any(line.startswith(f"done  aborted at step {step} {name}: checkpointed and stopped")
               for line in engine.lines())
    assert engine.stderr() == ""
    _assert_resumable(engines, run, tmp_path, step)


def test_second_sigint_during_the_checkpoint_stops_at_once(engines, tmp_path: Path) -> None:
    from engine.checkpoint import store

    run, checkpoints = tmp_path / "run", tmp_path / "run" / "checkpoints"
    first = engines.spawn([*LONG, "--run-dir", str(run)], tmp_path)
    first.wait_for(r"^step\s+2/")
    first.signal(signal.SIGTERM)
    assert first.wait(60) == 130
    saved = store.load_latest(checkpoints).meta["step"]
    # Resumed (so no step-0 save) with every save taking 30 s: the graceful checkpoint is a long write.
    engine = engines.spawn(["--resume", str(run)], tmp_path, faults="slow_save=30")
    engine.wait_for(rf"^step\s+{saved + 3}/")
    engine.signal(signal.SIGINT)
    deadline = time.monotonic() + 30
    while not any(checkpoints.glob(f".*.tmp-{engine.pid}")):  # the graceful checkpoint is being written
        assert time.monotonic() < deadline, "the first SIGINT started no checkpoint"
        time.sleep(0.01)
    engine.signal(signal.SIGINT)
    assert engine.wait(20) == 130, engine.stderr()  # well before the 30 s save would have finished
    finished = events_of(run, "run_finished")[-1]
    assert finished["status"] == "interrupted" and finished["reason"] == "second SIGINT: stopped at once"
    assert store.load_latest(checkpoints).meta["step"] == saved  # the interrupted write replaced nothing
    assert "Traceback" not in engine.stderr()
    _assert_resumable(engines, run, tmp_path, saved)


def test_sigusr1_checkpoints_now_and_training_goes_on(engines, tmp_path: Path) -> None:
    run = tmp_path / "run"
    engine = engines.spawn([*LONG, "--run-dir", str(run)], tmp_path)
    engine.wait_for(r"^step\s+3/")
    engine.signal(signal.SIGUSR1)
    step = int(engine.wait_for(r"^ckpt  step (\d+) manual ").group(1))
    engine.wait_for(rf"^step\s+{step + 3}/")  # still training
    engine.signal(signal.SIGTERM)
    assert engine.wait(60) == 130
    manual = [e for e in events_of(run, "checkpoint") if e["kind"] == "manual"]
    assert [e["step"] for e in manual] == [step]
    assert set(verify_all(run / "checkpoints").values()) == {"ok"}


def test_sighup_without_a_terminal_keeps_training(engines, tmp_path: Path) -> None:
    run = tmp_path / "run"
    engine = engines.spawn([*LONG, "--run-dir", str(run)], tmp_path)
    engine.wait_for(r"^step\s+3/")
    engine.signal(signal.SIGHUP)
    at = len(engine.lines())
    engine.wait_for(r"^warn  SIGHUP: no terminal attached; training goes on", after=0)
    engine.wait_for(r"^step\s+\d+/", after=at + 1)
    engine.signal(signal.SIGTERM)
    assert engine.wait(60) == 130


class _Terminal:
    """A pseudo-terminal whose master side the test holds; reading it keeps the engine from blocking."""

    def __init__(self) -> None:
        # The test keeps a slave fd open too: with no slave open, reading the master fails with EIO.
        self.master, self.slave = pty.openpty()
        self.slave_name = os.ttyname(self.slave)
        self.text = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 4096)
            except OSError:
                return
            if not data:
                return
            self.text += data

    def wait_for(self, needle: bytes, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text:
            assert time.monotonic() < deadline, f"terminal never showed {needle!r}: {self.text[-500:]!r}"
            time.sleep(0.02)

    def hang_up(self) -> None:
        """Close the master: the kernel sends SIGHUP to the session leader, as when an SSH session drops."""
        os.close(self.master)
        os.close(self.slave)


def _wait_for_file(path: Path, needle: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while True:
        text = path.read_text(errors="replace") if path.exists() else ""
        if needle in text:
            return text
        assert time.monotonic() < deadline, f"{path.name} never showed {needle!r}:\n{text[-800:]}"
        time.sleep(0.02)


def test_hangup_on_a_real_terminal_keeps_training_into_engine_log(engines, tmp_path: Path) -> None:
    run = tmp_path / "run"
    terminal = _Terminal()
    engine = engines.spawn([*LONG, "--run-dir", str(run)], tmp_path, tty=terminal.slave_name)
    terminal.wait_for(b"step        3/")
    terminal.hang_up()
    log = run / "engine.log"
    text = _wait_for_file(log, "SIGHUP: terminal gone; training goes on, output now in")
    before = max(int(line.split()[1].split("/")[0]) for line in terminal.text.decode().splitlines()
                 if line.startswith("step "))
    deadline = time.monotonic() + 60
    while not any(line.startswith("step ") and int(line.split()[1].split("/")[0]) > before + 3
                  for line in text.splitlines()):
        assert time.monotonic() < deadline, f"no training after the hang-up:\n{text[-800:]}"
        time.sleep(0.05)
        text = log.read_text()
    assert engines.wait(engine.pid, 0) is None  # still running, minutes after its terminal went away
    engine.signal(signal.SIGTERM)
    assert engine.wait(60) == 130
    assert "done  aborted" in log.read_text()
    assert set(verify_all(run / "checkpoints").values()) == {"ok"}


def test_hangup_with_on_hangup_stop_checkpoints_and_exits(engines, tmp_path: Path) -> None:
    run = tmp_path / "run"
    terminal = _Terminal()
    engine = engines.spawn([*LONG, "--on-hangup", "stop", "--run-dir", str(run)], tmp_path,
                           tty=terminal.slave_name)
    terminal.wait_for(b"step        3/")
    terminal.hang_up()
    assert engine.wait(60) == 130
    assert "SIGHUP: terminal gone; checkpointing and stopping (--on-hangup stop)" in (run / "engine.log").read_text()
    finished = events_of(run, "run_finished")[-1]
    assert finished["reason"] == "SIGHUP: checkpointed and stopped (--on-hangup stop)"
    assert finished["steps"] >= 3
    _assert_resumable(engines, run, tmp_path, finished["steps"])


@pytest.mark.slow
def test_sigterm_during_a_long_evaluation_checkpoints_without_finishing_it(engines, tmp_path: Path) -> None:
    run = tmp_path / "run"
    # 2,500 validation windows: an eval takes ~1 s here, against the ~20 ms it takes to see the step line.
    engine = engines.spawn([*TOY, "--set", "toy.val_samples=2500", "--max-steps", "100000", "--eval-every", "5",
                            "--checkpoint-every", "1000", "--run-dir", str(run)], tmp_path)
    engine.wait_for(r"^step\s+5/", timeout=120)  # the step-5 eval starts right after this line
    engine.signal(signal.SIGTERM)
    assert engine.wait(60) == 130
    assert [e["step"] for e in events_of(run, "eval")] == [0]  # the step-5 eval never completed
    finished = events_of(run, "run_finished")[-1]
    assert finished["steps"] == 5 and finished["reason"] == "SIGTERM: checkpointed and stopped"
    saved = events_of(run, "checkpoint")
    assert (saved[-1]["step"], saved[-1]["kind"]) == (5, "final")
    assert not (run / "checkpoints" / "best.safetensors").exists()  # no eval result, no best
    _assert_resumable(engines, run, tmp_path, 5)
