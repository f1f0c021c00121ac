"""Dashboard panels: header, metric charts, memory, progress, system, log, status line."""
