"""The run directory, the one contract between an engine and its viewers: events, status, lock, sinks,
the event history (history/) and the control channel (control/)."""
