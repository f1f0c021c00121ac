"""``runtime.compile``: what torch.compile compiles, when, and what compiling costs, told as events.

Modes:

- ``off``: eager (the default: on CPU compile has not shown a win on the built-in tasks, docs/BENCHMARKS.md).
- ``blocks``: the ``forward`` of each unit the task declares (``Task.compile_units``; by default the
  units FSDP2 shards, the transformer blocks) is compiled in place. Blocks of one class share one graph
  (dynamo caches per code object and lifts a module's parameters to graph inputs), so compile seconds do
  not grow with depth: torchtitan's per-block pattern. Hooks stay outside the compiled ``forward``, so
  FSDP2's all-gathers and reshards run eagerly around each compiled block.
- ``model``: the module the loss runs through (the DDP wrapper, FSDP2's root, or the model) goes inside
  ``torch.compile``'s wrapper. The Trainer's own model stays unwrapped: checkpoints, evaluation, export and
  the memory budget use it, so no state-dict name ever carries ``_orig_mod.`` and a checkpoint does not
  depend on compile (a run saved compiled resumes eager and the reverse).

When: ``apply`` runs once, right before the first training step: after the step-0 evaluation and the
overfit gate, whose ``deepcopy`` of a model compiled in place would share the original's compiled
``forward`` (a deep copy keeps the same function object). Compiling itself happens inside the first
step (dynamo is lazy); the viewer sees a "compiling" phase until then, and a ``CompileDone`` event
carries the seconds it took.

Batch size: dynamo's automatic dynamic shapes. The first compile specialises on the micro-batch; the
first change of it (a live ``set batch_size``, OOM back-off, a short last micro-batch) recompiles once
with a symbolic batch dimension, and every later size reuses that graph. A live batch change therefore
costs at most one recompile per compiled function, ever (sizes 0 and 1 are specialised by dynamo: a
micro-batch of 1 compiles once more). Marking the dimension dynamic up front would save that one
recompile, but it raises for a task whose model specialises the batch (a B×B contrastive target built
inside the model) and makes every run's first graph symbolic even when the batch never changes.

Recompiles are events: a callback counts dynamo's compiles (nothing is read on a step that compiled
nothing); after such a step dynamo's compilation records (one a compiled frame, with the guard that
failed for a recompile) become ``CompileDone`` events with the reason, and a total.

Evaluation runs eagerly (``eager()``): in ``blocks`` mode the blocks are compiled in place, and a
no-grad, eval-mode pass would be a second graph to compile (seconds on CPU) for a pass that runs every
``eval_every`` steps. In ``model`` mode evaluation uses the unwrapped model anyway.

Not a live setting: switching modes mid-run means recompiling the whole model at a step boundary (tens
of seconds on CPU) and undoing in-place compiles; a search over modes (autotune) compares short runs,
each started with its mode.
"""

from __future__ import annotations

import threading
import time
import types
from contextlib import nullcontext
from typing import Callable

from engine.run import events as ev

#: Characters of a recompile reason kept in its event (dynamo's guard text can run to pages).
REASON_CHARS = 400


class Compiler:
    """Applies ``runtime.compile`` to the modules a step runs through and reports compiles (module docstring)."""

    def __init__(self, mode: str, backend: str, emit: Callable[[ev.Event], None]) -> None:
        """``mode``: off / blocks / model; ``backend``: torch.compile's (inductor; aot_eager and eager trace
        without generating code, for debugging and for tests whose point is the wiring)."""
        self.mode, self.backend, self.emit = mode, backend, emit
        self.applied = False
        #: Compiled frames so far, and how many of them were recompiles (each told in a CompileDone event).
        self.compiles = self.recompiles = 0
        #: Wall seconds spent compiling (forward and lazily compiled backward graphs) so far.
        self.seconds = 0.0
        self._lock = threading.Lock()
        self._started: float | None = None
        self._pending = 0.0  # seconds compiled since the last report
        self._ran = False  # a compile finished since the last report
        self._seen: set[str] = set()  # compile ids already reported
        self._registered = False

    @property
    def enabled(self) -> bool:
        """True unless the mode is ``off``."""
        return self.mode != "off"

    def apply(self, train_model, units: list, step: int):
        """The module the loss should run through from now on (``train_model`` itself when off)."""
        if not self.enabled or self.applied:
            return train_model
        import torch

        self.applied = True
        self._seen.update(r.compile_id for r in _records())  # another run's, in this process
        self._register()
        what = f"{len(units)} blocks" if self.mode == "blocks" else "the model"
        self.emit(ev.PhaseStarted(phase="compiling", detail=f"torch.compile ({self.backend}) of {what}, "
                                  f"in the first step"))
        options = {"backend": self.backend, "isolate_recompiles": True}  # this run's entries, its own counts
        if self.mode == "model":
            return torch.compile(train_model, **options)
        compiled: dict = {}
        for unit in units:  # one compiled function per kind of block: blocks alike share their graph
            function = unit.forward.__func__
            kind = (function, _shape_of(unit))
            if kind not in compiled:
                compiled[kind] = torch.compile(function, **options)
            unit.forward = types.MethodType(compiled[kind], unit)
        return train_model

    def eager(self):
        """Context for a pass that must not compile (evaluation); nothing when compile is off."""
        if not self.applied:
            return nullcontext()
        import torch

        return torch.compiler.set_stance("force_eager")

    # -- dynamo's callbacks (any thread that compiles) ----------------------------------
    def _register(self) -> None:
        import torch._dynamo

        torch._dynamo.callback_handler.register_start_callback(self._on_start)
        torch._dynamo.callback_handler.register_end_callback(self._on_end)
        self._registered = True

    def _on_start(self, args) -> None:
        with self._lock:
            self._started = time.perf_counter()

    def _on_end(self, args) -> None:
        with self._lock:
            if self._started is not None:
                self._pending += time.perf_counter() - self._started
                self._started = None
            self._ran = True

    def close(self) -> None:
        """Stop listening to dynamo (the callbacks are process-wide; a second run in this process adds its own)."""
        if self._registered:
            import torch._dynamo

            for remove, fn in ((torch._dynamo.callback_handler.remove_start_callback, self._on_start),
                               (torch._dynamo.callback_handler.remove_end_callback, self._on_end)):
                try:
                    remove(fn)
                except ValueError:
                    pass
            self._registered = False

    # -- after a step --------------------------------------------------------------------
    def report(self, step: int) -> list[ev.CompileDone]:
        """Events for the frames compiled since the last call (one attribute read when none was)."""
        if not self._ran:
            return []
        with self._lock:
            seconds, self._pending, self._ran = self._pending, 0.0, False
        self.seconds += seconds
        frames = self._new_frames()
        recompiles = [f for f in frames if f.recompile_reason]
        self.compiles += len(frames)
        self.recompiles += len(recompiles)
        if not frames:
            return []
        first = self.compiles == len(frames)
        reasons = [_one_line(f.recompile_reason) for f in recompiles]
        return [ev.CompileDone(step=step, seconds=seconds, frames=len(frames), recompiles=len(recompiles),
                               reasons=reasons, total_compiles=self.compiles, total_recompiles=self.recompiles,
                               total_seconds=self.seconds, first=first, mode=self.mode, backend=self.backend)]

    def _new_frames(self) -> list:
        """dynamo's records of frames compiled since the last call (backward graphs have no frame of their own)."""
        out = []
        for record in _records():
            key = record.compile_id
            if key is None or key in self._seen or record.co_name is None:
                continue
            self._seen.add(key)
            out.append(record)
        return out


def _shape_of(unit) -> tuple:
    """What makes two blocks of one class compile to one graph: their submodules' types and parameter shapes.
    Blocks alike (a transformer's) share a compiled function; unlike ones (a U-Net's levels, all
    ``nn.Sequential``) get one each, so they neither recompile each other nor share one recompile limit."""
    modules = tuple((name, type(m).__name__) for name, m in unit.named_modules())
    params = tuple((name, tuple(p.shape), str(p.dtype), p.requires_grad) for name, p in unit.named_parameters())
    return modules, params


def _records() -> list:
    """dynamo's compilation records (the last 64 compiled frames of this process)."""
    from torch._dynamo.utils import get_compilation_metrics

    return get_compilation_metrics()


def _one_line(reason: str | None) -> str:
    """dynamo's guard-failure text as one line, cut to REASON_CHARS."""
    text = " ".join((reason or "").split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"
