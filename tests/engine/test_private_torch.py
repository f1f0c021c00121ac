"""Private torch names in engine/: each one listed with its reason, and only where torch has no public way.

A private name is any dotted name that starts at torch and has a part beginning
with ``_`` (``torch._dynamo``, ``torch.utils._pytree.tree_map``,
``torch.amp.grad_scaler._refresh_per_optimizer_state``), whether imported or
read through an imported name. The scan follows the names an import binds
(``import torch.x as y``, ``from torch.x import y``), not attributes of objects
whose type only the running program knows.

Allowed places: engine/budget (the memory tracer runs the step on fake tensors
under dispatch modes and torch's memory trackers, none of which is public) and
engine/training/batches.py (the DataLoader shutdown fix), and
engine/training/compile.py (compile events; issue 41 named only the first two).
Looked for in torch 2.13: ``torch.compiler.__all__`` has no callback for a
compile's start and end and no record of compiled frames or of a recompile's
failed guard. A custom backend (``torch.compile(backend=fn)``, public) hears of
each graph, but wrapping inductor needs ``torch._inductor``, and it never sees
the guard that failed; timing the first step, or calling a slow step a
recompile, cannot tell a compile from a checkpoint, an evaluation or a GC pause,
and has no reason to report. So CompileDone keeps dynamo's own. A new private name
anywhere fails ``test_private_torch_names_stay_where_they_are_allowed``; a new
one in an allowed place, or one that went away, fails the listing's test until
USES says it with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Where a private torch name may be used, and why.
ALLOWED_PLACES = {
    "engine/budget/": "the memory tracer: fake tensors, dispatch modes and torch's memory trackers (none public)",
    "engine/training/batches.py": "the DataLoader shutdown fix (torch's SIGCHLD watch has no public handle)",
    "engine/training/compile.py": "compile events: torch has no public hook for when dynamo compiles, nor its "
                                  "records of compiled frames and recompile reasons",
}
#: Every private torch name used under engine/, by file, with its reason.
USES: dict[str, dict[str, str]] = {
    "engine/budget/cpu_meter.py": {
        "torch.utils._python_dispatch.TorchDispatchMode": "counts a CPU step's allocations at the dispatcher",
        "torch.utils._pytree.tree_leaves": "the tensors in an op's outputs, however nested",
    },
    "engine/budget/step.py": {
        "torch.amp.grad_scaler._refresh_per_optimizer_state": "the traced fp16 scaler's per-optimizer state, "
                                                               "as GradScaler builds it",
    },
    "engine/budget/trace_step.py": {
        "torch._subclasses.fake_tensor.FakeTensorMode": "runs the step on fake tensors: no memory, no compute",
        "torch.utils._pytree.tree_map": "turns a batch's tensors into fake ones, however nested",
        "torch.utils._pytree.tree_leaves": "the tensors in a loss's outputs",
    },
    "engine/budget/trace_worker.py": {
        "torch.distributed._tools.mem_tracker._MemRefType": "the tracker's categories (parameters, gradients…)",
        "torch.distributed._tools.mem_tracker._ModState": "the tracker's per-module phases",
        "torch.distributed._tools.mem_tracker.MemTracker": "torch's memory tracker of a step",
        "torch._subclasses.fake_tensor.FakeTensorMode": "builds the model and runs the step on fake tensors",
        "torch._subclasses.fake_tensor.FakeTensor": "a deep copy of a fake tensor (peft's modules_to_save) stays "
                                                     "in its fake mode",
        "torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker": "the tracker for FSDP2-sharded steps",
        "torch.testing._internal.distributed.fake_pg.FakeStore": "a process group of fake ranks for FSDP2's trace",
    },
    "engine/budget/truth.py": {
        "torch._C._profiler._EventType": "the profiler's allocation events (the measured truth)",
    },
    "engine/training/batches.py": {
        "torch.utils.data._utils.signal_handling": "takes the workers' pids off torch's SIGCHLD watch at close",
    },
    "engine/training/compile.py": {
        "torch._dynamo": "dynamo's start and end callbacks time each compile",
        "torch._dynamo.callback_handler.register_start_callback": "see torch._dynamo",
        "torch._dynamo.callback_handler.register_end_callback": "see torch._dynamo",
        "torch._dynamo.callback_handler.remove_start_callback": "see torch._dynamo",
        "torch._dynamo.callback_handler.remove_end_callback": "see torch._dynamo",
        "torch._dynamo.utils.get_compilation_metrics": "the frames compiled and each recompile's reason",
    },
}


def _private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split("."))


def _dotted(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"]; None for anything but names and attributes."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def private_torch_names(source: str) -> set[str]:
    """The private torch names a module imports or reads through a name bound to torch (module docstring)."""
    tree = ast.parse(source)
    bound: dict[str, str] = {}  # local name → the torch path it stands for
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "torch":
                    bound[alias.asname or "torch"] = alias.name if alias.asname else "torch"
                    if _private(alias.name):
                        found.add(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "torch":
            for alias in node.names:
                path = f"{node.module}.{alias.name}"
                bound[alias.asname or alias.name] = path
                if _private(path):
                    found.add(path)
    inner = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:  # a whole chain, not its prefixes
            parts = _dotted(node)
            if parts and parts[0] in bound and not _private(bound[parts[0]]):  # (a private import is listed once)
                path = ".".join([bound[parts[0]], *parts[1:]])
                if _private(path):
                    found.add(path)
    return found


def _scan() -> dict[str, set[str]]:
    out = {}
    for path in sorted((ROOT / "engine").rglob("*.py")):
        names = private_torch_names(path.read_text(encoding="utf-8"))
        if names:
            out[path.relative_to(ROOT).as_posix()] = names
    return out


def test_private_torch_names_stay_where_they_are_allowed() -> None:
    def allowed(path: str) -> bool:
        return any(path == place or (place.endswith("/") and path.startswith(place)) for place in ALLOWED_PLACES)

    outside = [f"{path}: {', '.join(sorted(names))}" for path, names in _scan().items() if not allowed(path)]
    assert not outside, "use torch's public API here (or argue for a new allowed place):\n" + "\n".join(outside)


def test_every_private_torch_name_is_listed_with_its_reason() -> None:
    listed = {path: set(names) for path, names in USES.items()}
    assert _scan() == listed
    assert all(reason.strip() for names in USES.values() for reason in names.values())


def test_the_scan_finds_imports_and_reads_of_private_names() -> None:
    source = ("import torch\nimport torch._dynamo\nfrom torch.utils._pytree import tree_map\n"
              "from torch.nn import utils as u\nimport torch.nn.functional as F\n"
              "torch._foreach_norm([])\nu._private_helper()\nF.relu(x)\ntorch.nn.utils.clip_grad_norm_([], 1.0)\n"
              "obj._not_torch()\ntorch.__version__\n")
    assert private_torch_names(source) == {"torch._dynamo", "torch.utils._pytree.tree_map", "torch._foreach_norm",
                                           "torch.nn.utils._private_helper"}
