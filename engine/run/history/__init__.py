"""Reading a whole events.jsonl fast: step events as columns, every other event an object.

- ``store``: the History (list-like: step events as columns, the others as objects) and line decoding;
- ``read``: filling a History from the file, chunk by chunk, with or without its step lines (a viewer reads
  a run's steps from its step record, engine.run.steps).
"""

from engine.run.history.read import read_history
from engine.run.history.store import STEP_FIELDS, History, build_event, parse_line, parse_lines, parse_lines_of

__all__ = ["STEP_FIELDS", "History", "build_event", "parse_line", "parse_lines", "parse_lines_of", "read_history"]
