"""SIGKILL at 26 seeded moments, a third of them inside a checkpoint write: nothing is ever lost or corrupt.

One run directory, resumed after every kill. Kill moments rotate through
three kinds: a random delay after start (lands anywhere: start-up, restore,
training, eval, save), a random step, and mid-write (the temp file of a
slow save — SENSORLM_TUI_FAULTS=slow_save — is on disk, the rename not yet
done). After each kill every checkpoint file must verify, the resume must
start from the newest one, and the steps lost (reported progress minus the
resume step) must not exceed the checkpoint interval.
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from engine.run.steps import open_record
from tests.engine.reliability.harness import TOY, verify_all

pytestmark = pytest.mark.slow

INTERVAL = 5
KILLS = 26
SLOW_SAVE_S = 0.3
#: --max-steps of every killed run (the final run sets its own, which changes the LR schedule).
KILL_TOTAL = 100000


def _wait_for_temp(directory: Path, pid: int, timeout: float = 30) -> bool:
    """Poll until the engine's checkpoint temp file exists (it is mid-write), or give up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(directory.glob(f".*.tmp-{pid}")):
            return True
        time.sleep(0.005)
    return False


def _recorded_since(run: Path, began: float) -> dict[int, float]:
    """Step → loss of the steps the run's step record holds that were logged after ``began`` (one attempt's)."""
    try:
        with open_record(run) as record:
            steps, loss = record.window("loss", 0, 2**62)
            _, stamps = record.window("t", 0, 2**62)
    except FileNotFoundError:
        return {}
    return {step: value for step, value, t in zip(steps.tolist(), loss.tolist(), stamps.tolist()) if t >= began}


def test_sigkill_loop_loses_at_most_one_interval(engines, tmp_path: Path) -> None:
    from engine.checkpoint import store

    run, checkpoints = tmp_path / "run", tmp_path / "run" / "checkpoints"
    rng = random.Random(20261202)
    fresh = [*TOY, "--max-steps", str(KILL_TOTAL), "--eval-every", "25", "--checkpoint-every", str(INTERVAL),
             "--run-dir", str(run)]
    faults = f"slow_save={SLOW_SAVE_S}"
    resumed_at, lost, mid_write, corrupt, litter = 0, [], 0, [], 0
    losses: dict[int, list] = {}  # each step's loss in every attempt that logged it (the killed runs: one LR schedule)
    for i in range(KILLS):
        began = time.time()
        engine = engines.spawn(fresh if i == 0 else ["--resume", str(run)], tmp_path, faults=faults)
        if i == 0:  # a run killed before its first checkpoint has nothing to resume, by design
            engine.wait_for(r"^ckpt  step 0 last", timeout=60)
        else:
            start = int(engine.wait_for(r"^start .* at step (\d+)", timeout=60).group(1))
            assert start == resumed_at, f"kill {i}: resumed at {start}, newest good checkpoint is {resumed_at}"
        kind = i % 3
        if kind == 0:
            time.sleep(rng.uniform(0.0, 1.0))  # the random moment is the point of this kill
        elif kind == 1:
            target = resumed_at + rng.randint(1, 2 * INTERVAL + 3)
            engine.wait_for(rf"^step\s+{target}/", timeout=60)
        else:
            assert _wait_for_temp(checkpoints, engine.pid), f"kill {i}: no checkpoint write began"
            time.sleep(rng.uniform(0.0, SLOW_SAVE_S * 0.8))
        engine.signal(signal.SIGKILL)
        assert engine.wait(30) == -signal.SIGKILL
        for step, loss in _recorded_since(run, began).items():  # read now: the next attempt redoes them
            losses.setdefault(step, []).append(loss)
        temps = list(checkpoints.glob(".*.tmp-*"))
        mid_write += any(p.name.endswith(f"-{engine.pid}") for p in temps)
        litter = max(litter, len(temps))
        report = verify_all(checkpoints)
        corrupt += [f"kill {i}: {name}: {why}" for name, why in report.items() if why != "ok"]
        progress = max(engine.last_step(), resumed_at)
        newest = store.load_latest(checkpoints).meta["step"]
        assert newest >= resumed_at, f"kill {i}: checkpoint went back from {resumed_at} to {newest}"
        lost.append(progress - newest)
        resumed_at = newest

    final = engines.spawn(["--resume", str(run), "--max-steps", str(resumed_at + 12)], tmp_path)
    assert final.wait(120) == 0, final.stderr()
    assert final.lines()[-1].startswith(f"done  finished at step {resumed_at + 12}")

    assert corrupt == [], corrupt
    assert max(lost) <= INTERVAL, f"steps lost per kill: {lost}"
    assert mid_write >= KILLS // 3 - 1, f"only {mid_write} kills landed inside a checkpoint write"
    assert litter <= 1, "temp files of killed writes must not pile up"
    # Every replayed step (lost, then redone after a resume) computed exactly the loss it had the first time, among
    # the runs with one LR schedule: the final run's --max-steps changes it (a cosine over a dozen steps, not
    # KILL_TOTAL), so a step it replays after its first trains at another LR by design. The step record keeps the
    # last attempt of each step, so each killed attempt's steps were read from it after its kill.
    replayed = [step for step, values in losses.items() if len(values) > 1]
    differing = {step: values for step, values in losses.items() if len(set(values)) > 1}
    assert replayed, "no step was ever redone: the kills did not test resume"
    assert not differing, f"replayed steps diverged: {differing}"
    assert resumed_at > 3 * INTERVAL  # the loop made real progress between kills
    print(f"kill loop: {KILLS} kills, {mid_write} mid-write, corrupt 0, steps lost max {max(lost)} "
          f"(interval {INTERVAL}), mean {sum(lost) / len(lost):.1f}, {len(replayed)} steps redone identically, "
          f"reached step {resumed_at}")
