"""Entry points: the engine process, the in-process session, signals, the export and plan commands,
and a distributed job's supervisor and rank worker."""
