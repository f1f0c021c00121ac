"""Memory budget of a training step: predict it, trace it, measure it, plan and guard with it.

- ``analytic``: closed-form upper bound per task, pure arithmetic (no torch, < 1 ms), built
  as a ``ledger`` of stages by the task's own model (``spec.analytic_memory``, in the task's
  package); ``estimate`` is the result type every predictor returns.
- ``trace``: two real optimizer steps under FakeTensorMode + MemTracker, in a
  subprocess, cached by config hash (seconds, any batch size, no real memory).
- ``truth``: ground truth for tests and benchmarks (allocator events on CPU,
  ``max_memory_allocated`` on CUDA).
- ``measure``: what a running engine samples (CUDA allocator, NVML) and the
  calibration that folds context and allocator overhead into predictions.
- ``plan`` / ``guard`` / ``hook``: largest batch per backend, refusal at start
  with options, and the object the Trainer consults for live changes.

Only ``step``, ``trace_worker``, ``truth`` and the CUDA parts of ``measure``
(and ``hook``, through them) import torch; everything ``sensorlm-tui plan``
needs is torch-free. docs/MEMORY.md is the user-facing summary.
"""
