"""Which training samples each step reads: a seeded permutation per epoch, sharded by rank, resumable anywhere.

Epoch ``e``'s order is ``default_rng((seed, e)).permutation(n)`` (the frozen
``arange(n)`` for overfit runs), so it costs no RNG state to save: the state is
just ``(epoch, position)``, where ``position`` counts samples consumed from
this rank's shard. Counting samples, not steps, is what lets a batch-size
change neither replay nor skip a sample, and makes resume exact at any point.

Rank ``r`` of ``world`` reads ``order[r::world]``, cut to ``n // world`` so
every rank has the same number of samples per epoch (a rank with one more
would take one more step and wait forever in a collective); the up to
``world - 1`` samples cut are a different few each epoch. With ``world = 1``
the shard is the whole permutation, so single-process runs read exactly what
they always did.

Memory: one epoch's permutation is held (8 bytes a sample), hence the cap on
the training-set size (``MAX_SAMPLES``).
"""

from __future__ import annotations

import numpy as np

#: Largest training set accepted: a typo like train_samples = 1e12 must be a one-line error, not a 7 TiB
#: MemoryError mid-run (each epoch's order is held in memory, 8 bytes a sample: 800 MB here).
MAX_SAMPLES = 100_000_000


class SampleOrder:
    """This rank's resumable position in the per-epoch sample permutations."""

    def __init__(self, size: int, seed: int, shuffle: bool = True, rank: int = 0, world: int = 1,
                 source: str = "training set") -> None:
        """``size`` training samples; ``shuffle=False`` keeps 0..size-1 (overfit runs); ``rank`` of ``world``;
        ``source`` names the setting the size came from, for the error when it is too large."""
        if not 0 < size <= MAX_SAMPLES:
            raise ValueError(f"{source}={size:,}: at most {MAX_SAMPLES:,} and at least 1 (each epoch's "
                             "sample order is held in memory)")
        if not 0 <= rank < world or size < world:
            raise ValueError(f"rank {rank} of {world} over {size} samples: need 0 <= rank < world <= samples")
        self.size, self.seed, self.shuffle, self.rank, self.world = size, seed, shuffle, rank, world
        #: Epoch being read, and samples of this rank's shard of it consumed so far.
        self.epoch = 0
        self.position = 0
        self._cache: tuple[int, np.ndarray] | None = None

    def shard(self, epoch: int) -> np.ndarray:
        """This rank's sample indices for ``epoch``, in reading order (cached for the current epoch)."""
        if self._cache is None or self._cache[0] != epoch:
            order = (np.random.default_rng((self.seed, epoch)).permutation(self.size) if self.shuffle
                     else np.arange(self.size))
            if self.world > 1:
                order = order[self.rank::self.world][: self.size // self.world]
            self._cache = (epoch, order)
        return self._cache[1]

    def per_rank(self, batch_size: int) -> int:
        """Samples this rank reads a step: the job's batch size, split evenly over the ranks."""
        return max(1, batch_size // self.world)

    def take(self, count: int) -> list[int]:
        """The next ``count`` indices, crossing into the next epoch as needed (advances the position)."""
        out: list[int] = []
        while len(out) < count:
            shard = self.shard(self.epoch)
            part = shard[self.position: self.position + count - len(out)]
            out.extend(part.tolist())  # Python ints, in one call (a generator of int() costs ~0.1 µs each)
            self.position += len(part)
            if self.position >= len(shard):
                self.epoch, self.position = self.epoch + 1, 0
        return out

    def copy(self) -> "SampleOrder":
        """An independent position in the same order (the epoch's permutation is shared, not drawn again)."""
        other = object.__new__(SampleOrder)
        other.__dict__.update(self.__dict__)  # _cache is replaced on a new epoch, never changed in place
        return other

    def peek(self, counts: list[int]) -> list[list[int]]:
        """The indices ``take`` would return for each of ``counts`` in turn, without moving."""
        state = self.state_dict()
        try:
            return [self.take(c) for c in counts]
        finally:
            self.load_state_dict(state)

    @staticmethod
    def state_for_world(meta: dict, world: int) -> dict:
        """The checkpoint's sample position for ``world`` ranks (it counts samples of one rank's shard).

        Rank r of w reads ``order[r::w]``, so after p samples each the ranks together have read exactly
        ``order[:p*w]``: the job's position is p × w whatever the world size, and a run saved by 2 ranks
        continues in 1 process (or 4) on the very next sample (up to world - 1 replayed when it does not divide).
        """
        saved = meta.get("world", 1)
        if not isinstance(saved, int) or isinstance(saved, bool) or saved < 1:
            raise ValueError(f"world={saved!r}: must be an integer >= 1")
        position = meta.get("position")
        if saved == world or not isinstance(position, int) or isinstance(position, bool):
            return {"epoch": meta.get("epoch"), "position": position}
        return {"epoch": meta.get("epoch"), "position": position * saved // world}

    def state_dict(self) -> dict:
        """``{"epoch", "position"}``: all it takes to continue exactly here."""
        return {"epoch": self.epoch, "position": self.position}

    def check(self, state: dict) -> None:
        """ValueError naming the field when ``state`` is not a position in this order."""
        for key in ("epoch", "position"):
            value = state.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{key}={value!r}: must be an integer >= 0")
        length = self.size // self.world
        if state["position"] >= length:
            raise ValueError(f"position={state['position']}: beyond the epoch ({length} samples per rank)")

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state`` (checked first: ValueError, nothing changed)."""
        self.check(state)
        self.epoch, self.position = state["epoch"], state["position"]
