"""The untrained filler is the prior-weighted blend; padding is inert; alignment inverts the generator's rotation."""

from __future__ import annotations

import numpy as np
import torch
from gapfill_helpers import make_config  # pytest puts this test directory on sys.path

from engine.tasks.gapfill import align, baselines, physics, synth
from engine.tasks.gapfill.task import GapfillTask


def _task(tiny_data, **sections) -> GapfillTask:
    task = GapfillTask(make_config(tiny_data, **sections))
    task.setup()
    return task


def test_untrained_model_equals_the_blend_to_fp32_precision(tiny_data):
    task = _task(tiny_data)
    torch.manual_seed(0)
    model = task.build_model()
    batch = task.make_batch(task.val_indices(), 0, train=False)
    with torch.no_grad():
        prediction, _, (aligned, visible) = task.predict(model, batch)
    # The blend written out: weights present · (visible + 1e-3) / |Δt|, normalised over the slots, per pixel.
    a, vis = aligned.double().numpy(), visible.double().numpy()
    present, hours = batch["present"].double().numpy(), batch["hours"].double().numpy()
    w = present[:, :, None, None] * (vis + 1e-3) / np.maximum(np.abs(hours), 1e-3)[:, :, None, None]
    some = present.sum(1) > 0
    assert some.sum() >= len(some) // 2
    expected = (w[some][:, :, None] * a[some]).sum(1) / w[some].sum(1)[:, None]
    np.testing.assert_allclose(prediction.numpy()[some], expected, rtol=0, atol=2e-6)
    assert (prediction.numpy()[~some] == 0).all()  # no usable neighbour: the blend of nothing is zeros
    assert model.head.weight.abs().sum() == 0  # and it gets there by construction, not by luck


def test_missing_slots_carry_no_weight_and_no_content(tiny_data):
    task = _task(tiny_data)
    torch.manual_seed(0)
    model = task.build_model()
    for p in model.head.parameters():  # a trained-looking head, so the network's path is live too
        torch.nn.init.normal_(p, std=0.05)
    batch = task.make_batch([0, 1, 2, 3], 0, train=True)
    padded = batch["present"] == 0
    assert padded.any(), "the tiny data set should give some samples fewer neighbours than slots"
    noisy = dict(batch)
    noisy["stack"] = batch["stack"].clone()
    noisy["stack"][padded] = torch.rand_like(noisy["stack"][padded])  # garbage where the padding is
    with torch.no_grad():
        clean_out, _, _ = task.predict(model, batch)
        noisy_out, _, _ = task.predict(model, noisy)
    torch.testing.assert_close(clean_out, noisy_out, rtol=0, atol=0)


def test_model_runs_channels_last(tiny_data):
    model = _task(tiny_data).build_model()
    conv = model.stem[0].weight
    assert conv.is_contiguous(memory_format=torch.channels_last)


def test_alignment_inverts_the_generators_rotation():
    # A noise-free frame rendered 3 hours before the target, aligned to it, is far closer than unaligned.
    regions = synth.active_regions(np.random.default_rng(0), 96)
    size, radius, t0 = 32, 12.8, 48.0
    before = physics.encode(synth.radiance(regions, size, radius, t0 - 3.0), np)
    now = physics.encode(synth.radiance(regions, size, radius, t0), np)
    batch = {"stack": torch.tensor(before, dtype=torch.float32)[None, None], "gain": torch.ones(1, 1, 6),
             "offset": torch.zeros(1, 1, 6), "hours": torch.tensor([[3.0]]), "radius": torch.tensor([radius]),
             "target": torch.tensor(now, dtype=torch.float32)[None], "target_gain": torch.ones(1, 6),
             "target_offset": torch.zeros(1, 6)}
    aligned, visible, truth = align.align(batch)
    aligned_error = (aligned[0, 0] - truth[0]).abs().mean()
    unaligned_error = (torch.tensor(before) - truth[0]).abs().mean()
    assert aligned_error < 0.4 * unaligned_error
    assert 0.9 < visible.mean() < 1.0  # a sliver at the east limb has rotated in: nobody saw it 3 hours ago


def test_baselines_agree_on_a_two_sided_sample():
    # One frame each side, 1 h before and 3 h after: linear puts 3/4 of the weight on the earlier frame.
    frames = torch.stack([torch.full((6, 4, 4), 0.2), torch.full((6, 4, 4), 0.6)])[None]
    present, hours = torch.ones(1, 2), torch.tensor([[1.0, -3.0]])
    assert torch.allclose(baselines.linear(frames, present, hours), torch.full((1, 6, 4, 4), 0.3))
    assert torch.allclose(baselines.nearest(frames, present, hours), frames[:, 0])
    blend = baselines.prior_blend(frames, torch.ones(1, 2, 4, 4), present, hours)
    assert torch.allclose(blend, torch.full((1, 6, 4, 4), 0.3), atol=1e-6)  # 1/|Δt| weights: linear in time
