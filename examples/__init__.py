"""Runnable examples, a package only so that import-linter can hold them to the public names (sensorlm_tui)."""
