"""A sample: one target frame, a gap hidden around it, and the nearest usable frames on each side.

Damage is what makes a sample: a gap of ``g`` frames is cut around the target
(the target at a random offset inside it), and the neighbours are the
``neighbours`` nearest *usable* frames before and after the gap (observed,
outside the gap, within ``max_hours``). Near the edge of the record or next
to an outage there may be fewer; the stack is padded to a fixed depth with
"missing" frames: zero content, present 0, time offset 0, gain 1, offset 0
(the identity transfer), so alignment leaves them zero and the blend and the
network give them zero weight.

Determinism: training damage is drawn from a generator seeded by (seed,
sample index, step), validation damage by (seed, sample index) alone, with
even validation slots short gaps and odd ones long, so a validation number
moves only when the model does and both gap classes are always measured.
Pure functions of their arguments, safe in prefetch threads and workers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.tasks.gapfill.shards import Timeline


@dataclass(frozen=True)
class Sample:
    """Arrays of one sample, stack padded to ``2 × neighbours`` slots (the batch stacks these)."""

    stack: np.ndarray          # (K, B, H, W) coded recorded frames
    present: np.ndarray        # (K,) 1 = a real neighbour, 0 = padding
    hours: np.ndarray          # (K,) target time − neighbour time (positive: the neighbour is earlier)
    gain: np.ndarray           # (K, B)
    offset: np.ndarray         # (K, B)
    target: np.ndarray         # (B, H, W) coded recorded target
    target_gain: np.ndarray    # (B,)
    target_offset: np.ndarray  # (B,)
    radius: float
    gap: int


def targets(timelines: list[Timeline]) -> list[tuple[int, int]]:
    """(timeline, frame) of every observed frame: the candidate targets, in a fixed order."""
    return [(k, int(i)) for k, tl in enumerate(timelines) for i in np.flatnonzero(tl.valid)]


def draw_gap(rng: np.random.Generator, long: bool, short_max: int, long_min: int, long_max: int) -> tuple[int, int]:
    """(gap length, target's offset inside it)."""
    gap = int(rng.integers(long_min, long_max + 1)) if long else int(rng.integers(1, short_max + 1))
    return gap, int(rng.integers(0, gap))


def _side(tl: Timeline, start: int, step: int, count: int, target_hour: float, max_hours: float) -> list[int]:
    """Up to ``count`` observed frame indices from ``start`` walking by ``step`` (±1), within ``max_hours``."""
    out, i, n = [], start, len(tl.hours)
    while 0 <= i < n and len(out) < count and abs(target_hour - tl.hours[i]) <= max_hours:
        if tl.valid[i]:
            out.append(i)
        i += step
    return out


def build(tl: Timeline, frame: int, gap: int, offset: int, neighbours: int, max_hours: float) -> Sample:
    """The sample for target ``frame`` of ``tl`` with ``gap`` frames hidden starting ``offset`` before it."""
    first, last = frame - offset, frame - offset + gap - 1
    t0 = tl.hours[frame]
    chosen = _side(tl, first - 1, -1, neighbours, t0, max_hours) + _side(tl, last + 1, 1, neighbours, t0, max_hours)
    K = 2 * neighbours
    bands, H, W = tl.frames.shape[1:]
    stack = np.zeros((K, bands, H, W), np.float32)
    present = np.zeros(K, np.float32)
    hours = np.zeros(K, np.float32)
    gain = np.ones((K, bands), np.float32)
    offs = np.zeros((K, bands), np.float32)
    for slot, i in enumerate(chosen):
        stack[slot] = tl.frames[i]
        present[slot] = 1.0
        hours[slot] = t0 - tl.hours[i]
        gain[slot], offs[slot] = tl.gain[i], tl.offset[i]
    return Sample(stack, present, hours, gain, offs, tl.frames[frame], tl.gain[frame].astype(np.float32),
                  tl.offset[frame].astype(np.float32), tl.radius, gap)


def collate(samples: list[Sample]) -> dict[str, np.ndarray]:
    """Stack samples into batch arrays (every stack already has the same depth)."""
    return {
        "stack": np.stack([s.stack for s in samples]),
        "present": np.stack([s.present for s in samples]),
        "hours": np.stack([s.hours for s in samples]),
        "gain": np.stack([s.gain for s in samples]),
        "offset": np.stack([s.offset for s in samples]),
        "target": np.stack([s.target for s in samples]),
        "target_gain": np.stack([s.target_gain for s in samples]),
        "target_offset": np.stack([s.target_offset for s in samples]),
        "radius": np.asarray([s.radius for s in samples], np.float32),
        "gap": np.asarray([s.gap for s in samples], np.float32),
    }
