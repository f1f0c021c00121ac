"""Reading a whole events.jsonl fast: step events as columns, and an index that makes reopening free.

- ``store``: the History (list-like: step events as columns, the others as objects) and line decoding;
- ``read``: filling a History from the file, chunk by chunk, or only its newest steps;
- ``index``: ``events.index``, the saved History that lets the next viewer skip the decode.
"""

from engine.run.history.read import read_history, read_rest
from engine.run.history.store import STEP_FIELDS, History, build_event, parse_line, parse_lines

__all__ = ["STEP_FIELDS", "History", "build_event", "parse_line", "parse_lines", "read_history", "read_rest"]
