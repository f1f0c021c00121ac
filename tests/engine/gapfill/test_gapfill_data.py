"""Shards and manifest: written by the generator, read back, and every bad input a one-line error naming the file."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file

from engine.tasks.gapfill import physics, samples, shards
from engine.tasks.protocol import TaskError
from tests.conftest import ROOT, cli_env


@pytest.fixture
def data(tiny_data, tmp_path):
    """A private copy of the tiny data set, free to damage."""
    return shutil.copytree(tiny_data, tmp_path / "data")


def _manifest(path):
    return json.loads((path / shards.MANIFEST).read_text())


def _rewrite_shard(path, name, edit_tensors=None, edit_meta=None):
    """Rewrite one shard (through the format's own writer) and fix its manifest entry, so only the edit is wrong."""
    from safetensors import safe_open

    with safe_open(str(path / name), "np") as handle:
        meta = dict(handle.metadata())
    tensors = load_file(str(path / name))
    if edit_tensors:
        edit_tensors(tensors)
    if edit_meta:
        edit_meta(meta)
    from safetensors.numpy import save_file

    save_file(tensors, str(path / name), metadata=meta)
    manifest = _manifest(path)
    manifest["shards"][name] = {"bytes": (path / name).stat().st_size, "sha256": shards.file_digest(path / name)}
    (path / shards.MANIFEST).write_text(json.dumps(manifest))


def test_round_trip_splits_by_day_and_digest(data):
    manifest = _manifest(data)
    assert not set(manifest["splits"]["train"]) & set(manifest["splits"]["val"])
    opened = shards.open_dataset(data)
    assert opened.digest == manifest["digest"] == shards.manifest_digest(manifest["shards"])
    assert opened.bands == physics.BANDS
    train = opened.timelines["train"][0]
    assert len(train.hours) == 4 * 12 and (np.diff(train.hours) > 0).all()
    assert not train.valid.all() and train.valid.any()  # the record has holes
    assert (train.frames[~train.valid] == 0).all()  # a missing frame is zeros, never NaN


def test_sample_padding_is_identity_missing_frames(data):
    timeline = shards.open_dataset(data).timelines["val"][0]
    frame = int(np.flatnonzero(timeline.valid)[0])  # the first observed frame: nothing before it
    sample = samples.build(timeline, frame, gap=1, offset=0, neighbours=2, max_hours=1000)
    missing = sample.present == 0
    assert missing.any() and (sample.hours[missing] == 0).all()
    assert (sample.gain[missing] == 1).all() and (sample.offset[missing] == 0).all()
    assert (sample.stack[missing] == 0).all()
    assert (sample.hours[~missing] < 0).all()  # every real neighbour is after the gap


def test_damage_is_deterministic_and_validation_has_both_gap_classes(data):
    from gapfill_helpers import make_config

    from engine.tasks.gapfill.task import GapfillTask

    task = GapfillTask(make_config(data))
    a, b = task.make_batch([3, 5], 7, True), task.make_batch([3, 5], 7, True)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    other_step = task.make_batch([3, 5], 8, True)
    assert not all(np.array_equal(a[k], other_step[k]) for k in ("gap", "hours"))
    val = task.make_batch(task.val_indices(), 0, False)
    short = val["gap"] <= task.cfg.samples.short_max
    assert short[0::2].all() and not short[1::2].any()


def _overlap(path):
    manifest = _manifest(path)
    manifest["splits"]["val"].append(manifest["splits"]["train"][0])
    (path / shards.MANIFEST).write_text(json.dumps(manifest))
    return shards.MANIFEST, "in both splits"


def _missing(path):
    name = sorted(_manifest(path)["splits"]["train"])[1]
    (path / f"g16_{name}.safetensors").unlink()
    return f"g16_{name}.safetensors", "shard missing"


def _truncated(path):
    target = path / f"g16_{_manifest(path)['splits']['val'][0]}.safetensors"
    raw = target.read_bytes()
    target.write_bytes(raw[: len(raw) // 2])
    return target.name, "truncated"


def _bands_swapped(path):
    name = f"g16_{_manifest(path)['splits']['train'][0]}.safetensors"

    def swap(meta):
        bands = meta["bands"].split(",")
        meta["bands"] = ",".join([bands[1], bands[0], *bands[2:]])

    _rewrite_shard(path, name, edit_meta=swap)
    return name, "out of order"


def _nan_frame(path):
    name = f"g16_{_manifest(path)['splits']['train'][2]}.safetensors"

    def poison(tensors):
        tensors["frames"][5, 2, 3, 3] = np.nan

    _rewrite_shard(path, name, edit_tensors=poison)
    return name, "frames of frame 5 has non-finite"


def _wrong_size(path):
    name = f"g16_{_manifest(path)['splits']['train'][0]}.safetensors"

    def crop(tensors):
        tensors["frames"] = np.ascontiguousarray(tensors["frames"][:, :, :8, :8])

    _rewrite_shard(path, name, edit_tensors=crop)
    return name, "8×8 pixels"


@pytest.mark.parametrize("damage", [_overlap, _missing, _truncated, _bands_swapped, _nan_frame, _wrong_size])
def test_bad_input_is_one_line_naming_the_file(data, damage):
    name, words = damage(data)
    with pytest.raises(TaskError) as info:
        shards.open_dataset(data)
    message = str(info.value)
    assert "\n" not in message and name in message and words in message, message


def test_data_command_writes_checks_and_refuses(tmp_path, data):
    out = tmp_path / "made"
    run = lambda *a: subprocess.run([sys.executable, "-m", "tui.cli", "data", "gapfill", *a],  # noqa: E731
                                    capture_output=True, text=True, env=cli_env(), cwd=ROOT, timeout=120)
    made = run("--out", str(out), "--days", "2", "--val-every", "2", "--size", "16", "--cadence-minutes", "240",
               "--instruments", "1")
    assert made.returncode == 0, made.stderr
    assert shards.open_dataset(out).height == 16
    again = run("--out", str(out), "--size", "16")
    assert again.returncode == 2 and "not an empty directory" in again.stderr
    _nan_frame(data)
    checked = run("--check", str(data))
    assert checked.returncode == 2 and checked.stderr.count("\n") == 1 and "non-finite" in checked.stderr
    assert "Traceback" not in checked.stderr
