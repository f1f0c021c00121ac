"""Traced estimate: the task's real model, two real optimizer steps, fake tensors — in a subprocess, cached.

``trace(config, ...)`` runs ``engine.budget.trace_worker`` in a child Python
(so this module stays torch-free and a crash in tracing is an error message,
not a dead engine) and caches the result as JSON under a key hashed from
everything that changes memory: the memory-relevant config fields, the torch
version, the device type, and the source of the step harness and the task.
Constant time in batch size (measured: research/memory.md, 0.5-3.5 s).

Fake CUDA is asked for only when the caller says the device is CUDA; the
caller (guard, hook) knows that from a CUDA build with a GPU. On a CPU-only
build fake CUDA tensors abort the interpreter in backward.

One rank of a job (``layout``, engine.budget.layout): ``batch_size`` is then
the rank's share. DDP is the one-process trace plus the reducer's gradient
buckets (the trainable bytes the worker reports); FSDP2 is its own trace, one
rank on a fake process group of the layout's world size (trace_worker).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from importlib import metadata, util
from pathlib import Path

from engine.budget.ahead import ahead_bytes
from engine.budget.layout import SINGLE, Layout
from engine.budget.settings import describe, with_settings
from engine.core.config import RunConfig
from engine.core.estimate import Estimate

#: Config fields that cannot change the memory of a step; left out of the cache key.
IRRELEVANT = {
    "name": None,
    "run_id": None,  # made afresh for every run: in the key, no run would ever find its trace
    "checkpoint": None,
    "budget": None,
    "train": {"max_steps", "epochs", "steps_per_epoch", "log_every"},
    "optimizer": {"lr"},
    "schedule": None,
    "evaluation": {"every", "overfit"},
    "policies": None,
    "runtime": {"threads", "device", "compile", "compile_backend",  # the trace is an eager step's
                "prefetch", "data_workers"},  # the batches built ahead are added to the traced step (_to_estimate)
}


class TraceError(RuntimeError):
    """The trace failed (model error, crash, timeout); ``str()`` is one line."""


def trace_device(target: str) -> str:
    """Where a trace meant for ``target`` can run on this machine: ``cuda`` only with a CUDA build of torch
    and a GPU that answers (fake CUDA tensors abort a CPU build's interpreter, and fused attention asks the device which
    kernel to run), else ``cpu`` — the same step on the host, which the caller labels: CUDA's allocator
    rounding, library workspaces and kernel choice are not in it. Torch is not imported for this."""
    import sys

    if target != "cuda":
        return "cpu"
    torch = sys.modules.get("torch")
    if torch is not None:  # an engine process: torch knows
        return "cuda" if torch.cuda.is_available() else "cpu"
    from engine.budget.measure import cuda_major_of_torch, nvml_device_info

    return "cuda" if cuda_major_of_torch() is not None and nvml_device_info() is not None else "cpu"


def default_cache_dir() -> Path:
    """``$SENSORLM_TUI_CACHE/traces`` or ``~/.cache/sensorlm-tui/traces``."""
    root = os.environ.get("SENSORLM_TUI_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "sensorlm-tui")
    return Path(root) / "traces"


def _source_files(task_name: str) -> list[Path]:
    """The step harness, the worker, and the sources of the package holding the task's class (in the key)."""
    from engine.core.registry import get_spec

    here = Path(__file__).resolve().parent
    files = [here / "step.py", here / "trace_worker.py", here.parent / "distributed" / "fsdp.py"]
    module = get_spec(task_name).task.partition(":")[0]
    try:
        spec = util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        origin = Path(spec.origin)
        package = "." in module or origin.name == "__init__.py"
        files += sorted(origin.parent.glob("*.py")) if package else [origin]
    return files


def cache_key(config: RunConfig, device: str, layout: Layout = SINGLE) -> str:
    """Hex digest of what decides a trace: memory-relevant config, torch version, device, layout, harness and task
    code."""
    data = config.model_dump(mode="json")
    for section, fields in IRRELEVANT.items():
        if fields is None:
            data.pop(section, None)
        else:
            for f in fields:
                data.get(section, {}).pop(f, None)
    digest = hashlib.sha256()
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "?"
    key = {"config": data, "device": device, "torch": torch_version}
    if layout.sharded:  # DDP's trace is the one-process trace (the buckets are added after)
        key["layout"] = layout.settings()
    digest.update(json.dumps(key, sort_keys=True).encode())
    for path in _source_files(config.task.name):
        try:
            digest.update(path.read_bytes())
        except OSError:
            pass
    return digest.hexdigest()[:24]


def _to_estimate(result: dict, config: RunConfig, device: str, seconds: float, layout: Layout = SINGLE,
                 target: str | None = None) -> Estimate:
    settings = describe(config) | {"device": device} | layout.settings()
    breakdown = {k: int(v) for k, v in result["breakdown"].items() if v}
    total = int(result["peak"])
    if layout.strategy == "ddp":  # allocated when DDP wraps the model: alive at every moment of the step
        breakdown["DDP gradient buckets"] = int(result.get("trainable_bytes", 0))
        total += breakdown["DDP gradient buckets"]
    batches, built = ahead_bytes(config, target or device, int(result.get("batch_bytes", 0)))
    if built:  # host memory beside the step at every moment of it (engine.budget.ahead)
        breakdown["batches built ahead"] = built
        total += built
        settings["batches_ahead"] = batches
    return Estimate(
        total=total,
        breakdown=breakdown,
        upper_bound=False,
        source="trace",
        settings=settings,
        modules={k: int(v) for k, v in result.get("modules", {}).items()},
        seconds=seconds,
    )


def run_worker(config: RunConfig, device: str = "cpu", timeout: float = 600.0, layout: Layout = SINGLE) -> dict:
    """Run the trace subprocess and return its raw result dict; TraceError on any failure.

    The worker imports what this process imports: this tree first, then every entry of this process's
    ``sys.path`` (a task plugin found through a path the engine was started with, not only an installed one)."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([root, *(p for p in sys.path if p)]))
    env.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="sensorlm-tui-trace-") as tmp:
        request, result = Path(tmp) / "request.json", Path(tmp) / "result.json"
        request.write_text(json.dumps({"config": config.model_dump(mode="json"), "device": device,
                                       "world": layout.world, "strategy": layout.strategy}))
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "engine.budget.trace_worker", str(request), str(result)],
                env=env, capture_output=True, text=True, timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise TraceError(f"memory trace timed out after {timeout:.0f} s") from None
        if proc.returncode != 0 or not result.exists():
            lines = [ln for ln in (proc.stderr or "").strip().splitlines() if ln.strip()]
            last = lines[-1] if lines else f"exit status {proc.returncode}"
            kind, _, message = last.partition(": ")
            if kind == "engine.tasks.protocol.TaskError":  # the task refused its input: bad input, not a trace bug
                from engine.tasks.protocol import TaskError

                raise TaskError(message)
            raise TraceError(f"memory trace failed: {last}")
        return json.loads(result.read_text())


def trace(
    config: RunConfig,
    batch_size: int | None = None,
    precision: str | None = None,
    device: str = "cpu",
    cache_dir: str | Path | None = None,
    use_cache: bool = True,
    timeout: float = 600.0,
    grad_accum: int | None = None,
    layout: Layout | None = None,
    target: str | None = None,
    **task_settings,
) -> Estimate:
    """Peak of two optimizer steps traced on fake tensors (see module docstring); cached by config hash.

    ``task_settings`` are the task's declared settings by name (engine.budget.settings). With a
    ``layout``, one rank of that job, and ``batch_size`` (or the config's) is the rank's share. ``target``:
    the device the run will use, when the trace runs on another (a CUDA run traced on this CPU): the
    batches built ahead count only against a CPU run's memory (engine.budget.ahead).
    """
    layout = layout or SINGLE
    config = with_settings(config, batch_size=batch_size, precision=precision, grad_accum=grad_accum,
                           **task_settings)
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = directory / f"{cache_key(config, device, layout)}.json"
    if use_cache and path.exists():
        try:
            cached = json.loads(path.read_text())
            return _to_estimate(cached, config, device, 0.0, layout, target)
        except (OSError, ValueError, KeyError):
            pass  # a torn cache file: trace again and overwrite it
    start = time.perf_counter()
    result = run_worker(config, device, timeout, layout)
    seconds = time.perf_counter() - start
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache only costs the next caller a trace
    return _to_estimate(result, config, device, seconds, layout, target)
