"""The step record: every step's metrics in columns, with a min / max / last pyramid, written as a run trains.

Where: ``<run>/steps/`` (``record_dir(run)``). What is in it, and why this format was chosen over Arrow,
Parquet, sqlite and duckdb (measured: ``python -m bench.step_record_formats``): docs/STEP_RECORD.md and
engine.run.steps.layout. Torch-free, numpy only: a viewer imports it in a few milliseconds.

Reading (what a viewer uses; memory is set by what is asked for, never by the run's length)::

    record = open_record(run_dir)          # FileNotFoundError when the run has no record (convert it)
    record.names()                         # every metric name, in order of first appearance; no value read
    record.rows, record.first_step, record.last_step
    env = record.envelope("loss", step_lo, step_hi, columns)
    env.x, env.count, env.min, env.max, env.last, env.last_step, env.nan   # one entry per pixel column
    env.sum, env.finite, env.mean          # the column's finite values: their sum, count and mean
    steps, values = record.window("loss", step_lo, step_hi)               # raw values (copies), a small window
    level = record.summary("loss", k)      # every complete block of 2**k values (k >= 7): min/max/last/nan/sum
    record.refresh()                       # a live run: take in what was appended since (True if anything)
    record.series("loss")                  # its columns (steps, values, pyramid blocks), read by position
    convert(run_dir, progress=callback)    # an older run (schema <= 2): its record built once from events.jsonl
    read_steps(run_dir)                    # {"step": ..., name: ...} aligned: pd.DataFrame(...) / pl.DataFrame(...)

``envelope(name, step_lo, step_hi, columns)`` splits the steps ``step_lo ≤ step ≤ step_hi`` into ``columns``
columns of equal width (integer edges ``x``; with more columns than steps some are empty) and gives, per
column, exactly what a pass over the raw values there gives: ``min`` / ``max`` over the values that are not
NaN (±inf count as values; NaN when the column has none), ``nan`` whether any value is NaN (``count > 0`` with
a NaN ``min`` is a column of NaN only), ``last`` the last raw value (NaN included) at ``last_step``, and
``count``. It reads pyramid blocks inside each column (about two per level) and raw values only at the
ragged edges (at most 127 on each side): kilobytes, at any zoom, whatever the run's length.

Nothing is memory-mapped (engine.run.steps.column says why): values are read by position, and the reader
keeps a coarse index of each sorted column (1/4096 of it).

Writing (the engine's drainer, the integrations, conversion)::

    writer = StepWriter(record_dir(run_dir))       # repairs what a killed writer left
    writer.append_event(step_logged_event)         # or writer.append(step, {"name": number, ...})
    writer.flush()                                 # one batch: values, pyramid, counts, then the commit
    writer.truncate_after(resume_step)             # a resumed run; a step at or below the last also redoes
    writer.append_columns(steps, {"name": array})  # bulk (conversion, benches)
    writer.close()

A step at or below the last committed one redoes from there: the record keeps the last attempt of each
step. A SIGKILL leaves at most values past a count, which no reader sees and the next writer overwrites.
"""

from engine.run.steps.envelope import Envelope
from engine.run.steps.layout import DIRNAME, record_dir
from engine.run.steps.reader import Series, StepRecord, Summary, open_record, read_steps
from engine.run.steps.writer import StepWriter


def convert(run_dir, progress=None, **options):
    """engine.run.steps.convert.convert, imported when first called (it brings msgspec and the event log's
    reader, which a viewer of a new run never needs)."""
    from engine.run.steps.convert import convert as build

    return build(run_dir, progress, **options)


def needs_conversion(run_dir, into=None) -> bool:
    """engine.run.steps.convert.needs_conversion, imported when first called."""
    from engine.run.steps.convert import needs_conversion as check

    return check(run_dir, into)


__all__ = ["DIRNAME", "Envelope", "Series", "StepRecord", "StepWriter", "Summary", "convert", "needs_conversion",
           "open_record", "read_steps", "record_dir"]
