"""What a StepLogged event becomes in the record: a row of numbers by name, each field in its chosen type.

Types per field (docs/STEP_RECORD.md measures what float32 loses): ``t`` float64 (float32 at 1.7e9 s is 128 s
coarse), ``epoch`` and ``batch_size`` int32, ``skipped`` uint8, every other field float32 (relative error
≤ 6e-8). ``step`` is the step column. A task's components are ``components.<name>``.
"""

from __future__ import annotations

import math
import operator

import numpy as np

#: Stored type of each StepLogged field (``step`` is the step column).
FIELD_DTYPES = {"t": "<f8", "epoch": "<i4", "batch_size": "<i4", "skipped": "u1", "loss": "<f4", "lr": "<f4",
                "grad_norm": "<f4", "samples_per_s": "<f4", "steps_per_s": "<f4", "tokens_per_s": "<f4",
                "mfu": "<f4"}


def event_row(event) -> dict[str, float]:
    """A StepLogged event's row by name: its numeric fields, its components as ``components.<name>``."""
    body = event.__dict__
    row = {name: body[name] for name in FIELD_DTYPES}
    for name, value in body["components"].items():
        row["components." + name] = value
    return row


def event_columns(events: list) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The columns of many StepLogged events at once (a drain's worth: one C-level pass per field)."""
    n = len(events)
    every = np.arange(n)
    out = {name: (every, np.fromiter(map(operator.attrgetter(name), events), np.float64, n)) for name in FIELD_DTYPES}
    parts = [event.components for event in events]
    for name in dict.fromkeys(key for part in parts for key in part):
        values = np.fromiter((part.get(name, math.nan) for part in parts), np.float64, n)
        present = np.fromiter((name in part for part in parts), bool, n)
        out["components." + name] = (every, values) if present.all() else (every[present], values[present])
    return out
