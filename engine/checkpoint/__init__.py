"""Checkpoints: the single-file format, DCP directories, the manager that decides when to save and what
to keep, the sharded manager, and which of the model's weights a checkpoint keeps."""
