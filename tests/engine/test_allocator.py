"""engine.training.allocator: freed memory is kept for the next step (far fewer page faults), unless the user chose."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

# A step's pattern: buffers of several sizes allocated, then all freed (the top of the heap is trimmed by default).
CHURN = """
import resource, sys
import numpy as np
if sys.argv[1] == "keep":
    from engine.training.allocator import keep_freed_memory
    print(keep_freed_memory(), file=sys.stderr)
def step():
    held = [np.ones(n << 18, np.float32) for n in (1, 2, 3, 4, 5, 6, 7, 8)]  # 1-8 MiB, 36 MiB in all
    del held
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str, **env: str) -> tuple[int, str]:
    out = subprocess.run([sys.executable, "-c", CHURN, mode], capture_output=True, text=True, timeout=60,
                         env={**os.environ, **env})
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip()), out.stderr.strip()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_a_step_that_frees_its_buffers_takes_its_pages_again_only_by_default():
    default, _ = _faults("default")
    kept, said = _faults("keep")
    assert "kept for the next step" in said
    assert default > 20 * 4 * 256, f"the default should fault most of 36 MiB a step again ({default} faults)"
    assert kept < default / 10, (kept, default)


def test_a_user_allocator_setting_is_left_alone():
    _, said = _faults("keep", MALLOC_ARENA_MAX="2")
    assert said == "allocator: left as set (MALLOC_ARENA_MAX is in the environment)"
