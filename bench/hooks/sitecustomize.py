"""Start-up and frame probes, active only when a benchmark puts this folder on PYTHONPATH and sets their variables.

Python imports ``sitecustomize`` at start-up from the first folder on
``sys.path`` that has one; the benchmarks (bench/startup.py,
bench/dashboard_overhead.py) prepend this folder for the processes they time.
A meta-path finder wraps the loader of the modules watched below, so the probe
runs right after that module has been executed, in whichever process imports it:

- ``BENCH_TORCH_MARK=FILE``: when ``import torch`` completes (the engine
  process, or the dashboard's worker thread with ``--in-process``), append
  ``pid start end`` (``time.time()``) to FILE.
- ``BENCH_FRAME_LOG=FILE``: wrap Textual's ``Screen._on_timer_update`` (the
  screen update: layout if needed, re-render the dirty widgets, composite,
  write to the terminal) and, at exit, write ``end_time seconds`` per update
  that did work (> 0.2 ms) to FILE. Costs two clock reads per update.

Without the variables nothing is installed. Costs one finder lookup per import
until the watched modules are seen.
"""

import atexit
import os
import sys
import time

_TORCH_MARK = os.environ.get("BENCH_TORCH_MARK")
_FRAME_LOG = os.environ.get("BENCH_FRAME_LOG")


def _after_torch(module, start):
    with open(_TORCH_MARK, "a", encoding="ascii") as out:
        out.write(f"{os.getpid()} {start:.6f} {time.time():.6f}\n")


def _after_screen(module, start):
    frames = []
    original = module.Screen._on_timer_update

    def _on_timer_update(self):
        begin = time.perf_counter()
        original(self)
        spent = time.perf_counter() - begin
        if spent > 2e-4:  # an update with nothing dirty returns in microseconds: not a frame
            frames.append((time.time(), spent))

    def dump():
        with open(_FRAME_LOG, "w", encoding="ascii") as out:
            out.writelines(f"{end:.6f} {spent:.6f}\n" for end, spent in frames)

    module.Screen._on_timer_update = _on_timer_update
    atexit.register(dump)


class _Probe:
    """Finds nothing itself; for a watched module it wraps the real loader's exec_module to run its probe."""

    def __init__(self, watched):
        self.watched = dict(watched)

    def find_spec(self, name, path=None, target=None):  # noqa: D102 - importlib's protocol
        if name not in self.watched:
            return None
        after = self.watched.pop(name)
        import importlib.util

        sys.meta_path.remove(self)  # the real finders only: find_spec below must not come back here
        try:
            spec = importlib.util.find_spec(name)
        finally:
            if self.watched:
                sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        original = spec.loader.exec_module
        start = time.time()

        def exec_module(module):
            original(module)
            after(module, start)

        spec.loader.exec_module = exec_module
        return spec


_watched = {}
if _TORCH_MARK:
    _watched["torch"] = _after_torch
if _FRAME_LOG:
    _watched["textual.screen"] = _after_screen
if _watched:
    sys.meta_path.insert(0, _Probe(_watched))
