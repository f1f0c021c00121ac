"""A NaN rollback across ranks: rank 0 picks the checkpoint, every rank loads that one, and a candidate that
fails on any rank is passed over on all (Checkpointer.rollback with a group; in-process, a scripted peer)."""

from __future__ import annotations

import torch

from engine.checkpoint import format as ckpt
from engine.core import config as cfg
from engine.run.control.requests import Controls
from engine.run.sinks import EventBus
from engine.training.loop import Trainer

torch.set_num_threads(1)


class Rank0Of2:
    """Rank 0 of a 2-rank group whose peer fails to load the checkpoints named in ``peer_fails``."""

    world, owner = 2, True

    def __init__(self, peer_fails: set[str]) -> None:
        self.peer_fails, self.sent = peer_fails, []

    def broadcast(self, obj):
        self.sent.append(obj)
        return obj

    def agree(self, flag: bool) -> bool:
        return flag or (self.sent[-1] is not None and self.sent[-1].path.name in self.peer_fails)


class Rank1Of2:
    """Rank 1: no directory of its own; receives rank 0's picks in turn (rank 0 loads each of them fine)."""

    world, owner = 2, False

    def __init__(self, picks: list) -> None:
        self.picks = list(picks)

    def broadcast(self, obj):
        assert obj is None  # rank 1 never offers a checkpoint of its own
        return self.picks.pop(0)

    def agree(self, flag: bool) -> bool:
        return flag


def _trained(tmp_path) -> Trainer:
    config = cfg.load(task="toy", overrides={"train": {"max_steps": 4}, "evaluation": {"every": 0},
                                             "checkpoint": {"every_steps": 1}})
    trainer = Trainer(config, EventBus(), Controls(), checkpoint_dir=tmp_path)
    trainer.setup()
    assert trainer.run().status == "finished"
    return trainer


def test_rank_0_skips_a_checkpoint_its_peer_could_not_load_and_all_load_the_same_older_one(tmp_path):
    trainer = _trained(tmp_path)
    assert {p.name for p in tmp_path.glob("*.safetensors")} >= {"last.safetensors", "last.prev.safetensors"}
    applied = []
    group = Rank0Of2(peer_fails={"last.safetensors"})
    loaded = trainer.checkpoints.rollback(lambda c: (applied.append(c.path.name), trainer.load(c)), group)
    # last loaded fine here but not on the peer: passed over on both; last.prev (step 3) is the agreed state.
    assert applied == ["last.safetensors", "last.prev.safetensors"]
    assert loaded.path.name == "last.prev.safetensors" and trainer.step == 3 == loaded.meta["step"]
    assert [c.path.name for c in group.sent] == applied

    # Rank 1, the peer that could not read `last`, applies exactly rank 0's picks in order and ends on the same.
    follower = _trained(tmp_path / "f")
    follower.checkpoints.directory = None  # DDP: only rank 0 has the files
    seen = []

    def apply(candidate) -> None:
        seen.append(candidate.path.name)
        if candidate.path.name == "last.safetensors":
            raise ckpt.CheckpointError("unreadable on rank 1")
        follower.load(candidate)

    got = follower.checkpoints.rollback(apply, Rank1Of2(group.sent))
    assert seen == applied and got.path.name == "last.prev.safetensors" and follower.step == 3
    for name, value in trainer.model.state_dict().items():
        assert torch.equal(value, follower.model.state_dict()[name]), name


def test_no_checkpoint_every_rank_can_load_stops_every_rank(tmp_path):
    trainer = _trained(tmp_path)
    names = {p.name for p in tmp_path.glob("*.safetensors")}
    group = Rank0Of2(peer_fails=names)
    assert trainer.checkpoints.rollback(trainer.load, group) is None
    assert group.sent[-1] is None and len(group.sent) == len(names) + 1  # every candidate offered, then "none"
