"""The step record: every step's metrics in columns, with a min / max / last pyramid, written as a run trains.

(API documentation: filled in below once the package settles.)
"""

from engine.run.steps.envelope import Envelope
from engine.run.steps.layout import DIRNAME, record_dir
from engine.run.steps.reader import Series, StepRecord, Summary, open_record, read_steps
from engine.run.steps.writer import StepWriter

__all__ = ["DIRNAME", "Envelope", "Series", "StepRecord", "StepWriter", "Summary", "open_record", "read_steps",
           "record_dir"]
