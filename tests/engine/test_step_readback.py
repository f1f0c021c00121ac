"""The deferred step readback (runtime.step_readback = deferred): no host sync a step, and the NaN policy exact.

On CPU nothing blocks, so what the sync counter counts is the calls that would block on CUDA: a device
tensor read to the host (``item``, ``tolist``, ``bool``/``float``/``int`` of a tensor, ``numpy``, ``cpu``),
made on the very code path a CUDA run takes (the Trainer with the deferred readback; the readback's own
host buffers are excluded, reading them is not a sync). It cannot see a sync inside a kernel (the CPU fused
AdamW reads ``found_inf`` in C++, where the CUDA kernel reads it on the device) nor CUDA's implicit ones
(a copy from pageable memory); the GPU script counts the real ones with torch.cuda.set_sync_debug_mode.
"""

from __future__ import annotations

import pytest
import torch

from bench.host_syncs import SyncCounter
from engine.checkpoint import format as ckpt
from engine.core import config as cfg
from engine.run.sinks import EventBus
from engine.training.loop import Trainer


def _config(readback: str, **sections):
    """A 30-step toy run read back ``readback``; ``sections`` (section → fields) laid over it."""
    return cfg.load(task="toy", overrides=cfg.deep_merge({
        "toy": {"dim": 16, "channels": 2, "length": 32},
        "train": {"max_steps": 30, "batch_size": 4}, "evaluation": {"every": 0}, "schedule": {"kind": "constant"},
        "runtime": {"prefetch": False, "step_readback": readback},
        "checkpoint": {"every_steps": 10}}, sections))


def _counted(readback: str, tmp_path) -> tuple[SyncCounter, list]:
    torch.set_num_threads(1)
    events: list = []
    trainer = Trainer(_config(readback), EventBus([events.append]), checkpoint_dir=tmp_path / readback)
    trainer.setup()
    with SyncCounter(trainer) as counter:
        assert trainer.run().status == "finished"
    return counter, events


def test_deferred_steps_make_no_host_sync_but_at_checkpoints_and_log_every_step(tmp_path) -> None:
    deferred, events = _counted("deferred", tmp_path)
    synced, reference = _counted("sync", tmp_path)
    # Synchronous: the step's values come back before optimizer.step(), once a step, every step.
    assert all(synced.by_step.get(step, 0) >= 1 for step in range(30)), synced.by_step
    # Deferred: syncs only where the run settles, at the evaluations (steps 0 and 30) and checkpoints (10, 20).
    assert set(deferred.by_step) <= {0, 10, 20, 30}, deferred.by_step
    steps = {e.step: e.loss for e in events if e.type == "step"}
    assert steps == {e.step: e.loss for e in reference if e.type == "step"} and sorted(steps) == list(range(1, 31))
    between = sum(n for step, n in deferred.by_step.items() if step not in (0, 10, 20, 30))
    print(f"host reads over 30 steps: sync {sum(synced.by_step.values())}, deferred {between} outside the "
          f"evaluations and checkpoints")


def _run(readback: str, directory, **sections) -> tuple[object, list]:
    torch.set_num_threads(1)
    events: list = []
    outcome = Trainer(_config(readback, **sections), EventBus([events.append]), checkpoint_dir=directory).run()
    return outcome, events


def test_deferred_nan_rollback_continues_exactly_as_the_synchronous_run(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SENSORLM_TUI_FAULTS", "nan@13-14")
    policy = {"policies": {"nan_patience": 2}, "train": {"max_steps": 20}, "evaluation": {"every": 5}}
    synced = _run("sync", tmp_path / "sync", **policy)
    deferred = _run("deferred", tmp_path / "deferred", **policy)
    assert synced[0].status == deferred[0].status == "finished"

    def story(events):
        return [(e.type, e.step) for e in events if e.type in ("step", "setting", "eval")]

    # Step 14 reaches the patience; deferred, step 15 had been queued from the last good weights when the
    # verdict was read: it is logged as it happened, then the same rollback to step 10, then the same run.
    a, b = story(synced[1]), story(deferred[1])
    cut = a.index(("setting", 10))
    assert b == a[:cut] + [("step", 15)] + a[cut:]
    def last(events):  # each step's loss the last time it was logged (a rollback logs steps again)
        return {e.step: e.loss for e in events if e.type == "step" and not e.skipped}

    assert last(synced[1]) == last(deferred[1])
    final = [ckpt.read(tmp_path / name / "last.safetensors") for name in ("sync", "deferred")]
    assert final[0].meta["step"] == final[1].meta["step"] == 20
    assert all(torch.equal(final[0].tensors[k], final[1].tensors[k]) for k in final[0].tensors)


def test_deferred_stop_names_the_same_steps_one_step_later(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SENSORLM_TUI_FAULTS", "nan@7")
    synced = _run("sync", tmp_path / "s", policies={"nan_patience": 1, "nan_policy": "stop"})
    deferred = _run("deferred", tmp_path / "d", policies={"nan_patience": 1, "nan_policy": "stop"})
    assert synced[0].status == deferred[0].status == "failed"
    assert synced[0].reason == deferred[0].reason == "stopped: 1 consecutive non-finite steps"
    assert [e.steps for e in synced[1] if e.type == "run_finished"] == [7]
    assert [e.steps for e in deferred[1] if e.type == "run_finished"] == [8]


def test_deferred_is_refused_where_the_optimizer_cannot_skip_on_the_device() -> None:
    trainer = Trainer(_config("deferred", runtime={"precision": "fp16"}), EventBus())
    with pytest.raises(ValueError, match="runtime.step_readback=deferred: needs the fused AdamW kernel"):
        trainer.setup()


def test_cpu_reads_the_step_values_one_by_one_and_they_are_the_stacked_reads_exactly(tmp_path) -> None:
    """CPU reads each value with ``.item()`` (no read waits there; the stack was one more kernel a step); CUDA
    stacks them into one transfer. Both paths give the very same numbers, so a run's log is the same either way."""
    runs = {}
    for read in ("each", "stacked"):
        torch.set_num_threads(1)
        events: list = []
        trainer = Trainer(_config("sync"), EventBus([events.append]), checkpoint_dir=tmp_path / read)
        trainer.setup()
        assert trainer.optim.host_read == "each"  # the CPU default
        trainer.optim.host_read = read
        with SyncCounter(trainer) as counter:
            assert trainer.run().status == "finished"
        runs[read] = (counter.per_step({0, 10, 20, 30}, 30), [(e.step, e.loss, e.grad_norm, e.components)
                                                              for e in events if e.type == "step"])
    assert runs["stacked"][0] == 1 and runs["each"][0] >= 2  # loss and grad norm, at least
    assert runs["each"][1] == runs["stacked"][1] and len(runs["each"][1]) == 30
