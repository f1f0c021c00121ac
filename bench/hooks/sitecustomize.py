"""Start-up probe, active only when a benchmark puts this folder on PYTHONPATH: when does `import torch` finish?

Python imports ``sitecustomize`` at start-up from the first folder on
``sys.path`` that has one; the benchmarks (bench/startup.py) prepend this folder
for the processes they time and set ``BENCH_TORCH_MARK`` to a file. A
meta-path finder then wraps torch's loader so that, in whichever process
imports torch (the engine process, or the dashboard's worker thread with
``--in-process``), one line ``pid start end`` (``time.time()``) is appended to
that file when the import completes. Costs one finder lookup per import until
torch is seen; nothing at all without the variable.
"""

import os
import sys
import time

_MARK = os.environ.get("BENCH_TORCH_MARK")


class _TorchImportProbe:
    """Finds nothing itself; for ``torch`` it wraps the real loader's exec_module to time-stamp its end."""

    def find_spec(self, name, path=None, target=None):  # noqa: D102 - importlib's protocol
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        original = spec.loader.exec_module
        start = time.time()

        def exec_module(module):
            original(module)
            with open(_MARK, "a", encoding="ascii") as out:
                out.write(f"{os.getpid()} {start:.6f} {time.time():.6f}\n")

        spec.loader.exec_module = exec_module
        return spec


if _MARK:
    sys.meta_path.insert(0, _TorchImportProbe())
