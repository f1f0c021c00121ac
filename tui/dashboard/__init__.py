"""The Textual apps (live and attach), the worker thread that pumps a session's events into them, and
the messages it posts."""
