"""An example sensorlm-tui task plugin (see README.md): nothing is imported here, so listing it costs nothing."""
