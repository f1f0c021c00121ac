"""The C allocator of a training process keeps the memory a step frees for the next step, instead of returning it.

Why. A step allocates and frees the same large buffers every time
(activations, gradients, a data worker's batch arrays). glibc's malloc hands
blocks above its mmap threshold back to the kernel when they are freed, and
trims the top of the heap past its trim threshold, so the next step takes
every page again: a minor page fault and a zeroed 4 KiB page each. Measured on
the bundled sensor demo (1 thread, CPU): ~1,100–2,900 page faults a step by default,
~30–140 with the settings below; the step ran ~5 % faster (6 interleaved
process pairs, 0.99–1.13, on a noisy shared 2-core VM; bench.allocator
has the engine-level rows). What it costs: freed memory up to
``TRIM_THRESHOLD`` stays in the process (its resident size stays at the step's
peak, which the next step needs again anyway).

Settings (``mallopt``): the mmap threshold at glibc's 64-bit maximum, 32 MiB
(larger blocks, e.g. a big model's weights, still come from mmap: they are
long-lived, so faulting them once costs nothing), and the trim threshold at
1 GiB. Setting either also stops glibc's dynamic threshold from moving.

Left alone when the user chose an allocator: any ``MALLOC_*`` tunable in the
environment, or ``LD_PRELOAD`` (jemalloc, tcmalloc). Not glibc (macOS, musl):
nothing to do. Applied in the trainer's process and in each DataLoader worker
(engine.training.batches), since the worker's batch arrays churn the same way.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import platform

#: glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
#: Blocks up to this size come from the heap and are reused (glibc caps it at 32 MiB on 64-bit).
MMAP_THRESHOLD = 32 << 20
#: Free memory at the top of the heap kept rather than returned to the kernel.
TRIM_THRESHOLD = 1 << 30
#: The environment variables through which a user tunes glibc's malloc themselves.
USER_TUNABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_ARENA_MAX",
                 "GLIBC_TUNABLES", "LD_PRELOAD")


@functools.cache
def keep_freed_memory() -> str:
    """Apply the settings in this process (once); a one-line description of what was done or why not."""
    chosen = [name for name in USER_TUNABLES if os.environ.get(name)]
    if chosen:
        return f"allocator: left as set ({chosen[0]} is in the environment)"
    if platform.libc_ver()[0] != "glibc":
        return "allocator: not glibc, left as it is"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and libc.mallopt(M_TRIM_THRESHOLD,
                                                                                    TRIM_THRESHOLD) == 1
    except (OSError, AttributeError):
        ok = False
    if not ok:
        return "allocator: mallopt refused, left as it is"
    return (f"allocator: freed blocks up to {MMAP_THRESHOLD >> 20} MiB are kept for the next step "
            f"(glibc mmap threshold {MMAP_THRESHOLD >> 20} MiB, trim threshold {TRIM_THRESHOLD >> 30} GiB)")
