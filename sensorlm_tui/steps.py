"""A run's step metrics for your own tools: ``read_steps(run_dir)`` loads the step record as aligned columns.

``pd.DataFrame(read_steps("runs/my-run"))`` and ``pl.DataFrame(read_steps("runs/my-run"))`` are the
one-liners (docs/STEP_RECORD.md); ``open_record`` is the reader a viewer uses (an envelope of any zoom, a raw
window, the metric names without their values). numpy only: pandas and polars are yours to bring.
"""

from engine.run.steps import open_record, read_steps

__all__ = ["open_record", "read_steps"]
